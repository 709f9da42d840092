"""The Neuron target: a configuration checked, planned (env vars, flags, knobs) and versioned."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, MutableMapping, Sequence

from autotune.errors import InvalidConfigError, TargetError
from autotune.records import CompileSpec, TraceSpec, TrialPlan
from autotune.space import SearchSpace
from autotune.space.parameters import Parameter
from autotune.targets.base import CacheUnit, Target, common_knobs, directory_usage, file_units, package_version
from autotune.targets.neuron.cache import CACHE_URL_ENV, TRACED_CACHE_DIR, XLA_CACHE_DIR, compile_cache_env, failed_entry, neuron_cache_entries
from autotune.targets.neuron.checks import check_configuration
from autotune.targets.neuron.cores import CORES_RESOURCE, VISIBLE_CORES, NeuronCoreSlot, rank_env
from autotune.targets.neuron.errors import NEURON_FAILURES
from autotune.targets.neuron.flags import (
    COMPILER_FLAGS,
    FLAGS_ENV,
    WRAPPER_FLAGS,
    XLA_BF16_VARS,
    XLA_BF16_VARS_UNTIL,
    canonical_flags,
    compiler_defaults,
    compiler_version,
    known_to,
    parse_user_flags,
)
from autotune.targets.neuron.platform import PLATFORM_SPACES, detect_platform, neuron_present, platform_family

#: The Neuron SDK's ahead-of-time compile of a script's graphs (torch-neuronx, XLA path).
PARALLEL_COMPILE = "neuron_parallel_compile"
#: The platform a compile on a machine with no Neuron device is for; AWS's own tools (nkipy's
#: ``get_platform_target``) read it before anything else, with the ``--target`` spellings.
PLATFORM_TARGET_OVERRIDE = "NEURON_PLATFORM_TARGET_OVERRIDE"

# ---------------------------------------------------------------------------------------------
# The target


class NeuronTarget(Target):
    name = "neuron"
    failure_patterns = NEURON_FAILURES
    spaces = ("neuron-trn1", "neuron-inf2", "neuron-trn2", "neuron-inf2-inference")
    device_resource = CORES_RESOURCE
    device_noun = "NeuronCores"
    device_flag = "--cores-per-trial"
    visible_devices = VISIBLE_CORES
    environment = (FLAGS_ENV,)
    # Not ``--target``: autotune's own option is spelled so too.
    spellings = (FLAGS_ENV, XLA_CACHE_DIR, *WRAPPER_FLAGS,
                 *(alias for flag in COMPILER_FLAGS for alias in flag.aliases if alias != "--target"))

    def space_name(self, platform: str | None = None) -> str:
        """trn1/trn1n -> neuron-trn1, inf2 -> neuron-inf2, trn2/trn3 -> neuron-trn2 (instance
        types such as ``trn1.32xlarge`` work too); ``None`` detects this machine's platform."""
        family = platform_family(platform) if platform is not None else detect_platform()
        if family is None:
            raise TargetError(
                f"unknown Neuron platform {platform!r}; choose one of {', '.join(PLATFORM_SPACES)}"
            )
        return PLATFORM_SPACES[family]

    def fit_space(self, space: SearchSpace) -> SearchSpace:
        """Only the settings the installed neuronx-cc knows; mixed-precision accumulation unset
        is that version's default (on since the compiler of Neuron 2.27), so that setting it to
        the default is the baseline's run; XLA_USE_BF16 and XLA_DOWNCAST_BF16 only where the
        installed torch-neuronx still reads them. Without a compiler here, the space as written."""
        version = compiler_version(package_version("neuronx-cc"))
        neuronx = compiler_version(package_version("torch-neuronx"))
        if neuronx is not None and neuronx >= XLA_BF16_VARS_UNTIL and "precision" in space.parameters:
            precision = space.parameters["precision"]
            space = replace(space, parameters={**space.parameters, "precision": replace(
                precision, choices=tuple(c for c in precision.choices or () if c not in XLA_BF16_VARS))},
                known_good=[e for e in space.known_good if e.get("precision") not in XLA_BF16_VARS])
        if version is None:
            return space
        parameters: dict[str, Parameter] = {}
        for name, param in space.parameters.items():
            if param.type == "bool":
                if not known_to(version, name, True):
                    continue
                if name == "mixed_precision_accumulation":
                    param = replace(param, unset_is=compiler_defaults(version)[name])
            elif param.choices is not None:
                param = replace(param, choices=tuple(v for v in param.choices if known_to(version, name, v)))
            parameters[name] = param
        known_good = [entry for entry in space.known_good
                      if all(name in parameters and known_to(version, name, value) for name, value in entry.items())]
        return replace(space, parameters=parameters, known_good=known_good)

    def check(self, params: Mapping[str, Any]) -> None:
        check_configuration(params)

    def plan(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> TrialPlan:
        self.check(params)
        base_env = base_env or {}
        native = params.get("path", "xla") == "native"
        env: dict[str, str] = {}
        notes: list[str] = []
        knobs = common_knobs(params)

        if native:
            knobs.compile = CompileSpec(backend="neuron")
            if params.get("native_opt_level") is not None:
                env["NEURON_COMPILER_OPT_LEVEL"] = f"-O{params['native_opt_level']}"
        else:
            knobs.lazy_device = True
            knobs.batches_per_execution = params.get("batches_per_execution")
            # trace() hands its compiler_args to neuronx-cc and reads no NEURON_CC_FLAGS: a script
            # that traces its model gets the settings of the plan's NEURON_CC_FLAGS there.
            knobs.trace = TraceSpec(data_parallel=params.get("data_parallel"), dynamic_batch=params.get("dynamic_batch"))

        precision = params.get("precision")
        if precision == "bf16_model":
            knobs.model_dtype = "bfloat16"
        elif precision == "bf16_autocast":
            knobs.autocast_device, knobs.autocast_dtype = ("neuron" if native else "xla"), "bfloat16"
        elif precision in XLA_BF16_VARS:
            var = XLA_BF16_VARS[precision]
            env[var] = "1"
            notes.append(f"{var} is deprecated since torch-neuronx 2.5 (torch-xla 2.5); "
                         "prefer precision bf16_model or bf16_autocast")
            if params.get("stochastic_rounding") is None:
                notes.append(f"{var} also turns on stochastic rounding unless "
                             "NEURON_RT_STOCHASTIC_ROUNDING_EN is set")

        if params.get("stochastic_rounding") is not None:
            env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1" if params["stochastic_rounding"] else "0"
        lnc = params.get("logical_nc_config") if native else params.get("lnc")
        if lnc is not None:
            # The runtime must group cores the way the compiler sharded the graph ("Logical
            # NeuronCore configuration"), so the flag and the env var are always set together.
            env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)

        user_flags = base_env.get(FLAGS_ENV, "")
        flags = canonical_flags(params, user_flags)
        if flags:
            env[FLAGS_ENV] = flags
        notes.extend(self._flag_notes(params, native, user_flags, package_version("neuronx-cc")))
        return TrialPlan(target=self.name, params=dict(params), env=env, flags_env=FLAGS_ENV,
                         knobs=knobs, notes=notes)

    @staticmethod
    def _flag_notes(params: Mapping[str, Any], native: bool, user_flags: str, compiler: str | None) -> list[str]:
        """What a user should know about the compiler flags this plan ends up with, and the
        compiler version they are for: the defaults that fill in what they leave unset."""
        notes: list[str] = []
        user = parse_user_flags(user_flags)
        user_keys = {f.key for f in user if f.kind == "known"}
        version = compiler_version(compiler)
        if version is not None:
            defaults = compiler_defaults(version)
            notes.append(f"compiler flags for neuronx-cc {compiler}: {canonical_flags(params, user_flags) or 'none'}; "
                         f"unset, its defaults are --auto-cast={defaults['auto_cast']} and mixed-precision "
                         f"accumulation {'on' if defaults['mixed_precision_accumulation'] else 'off'}")
        elif not native and params.get("auto_cast") is None and "auto_cast" not in user_keys:
            notes.append("--auto-cast is left at the compiler's default, which is none since Neuron "
                         "2.27 (matmult before): set auto_cast to pin it across SDK versions")
        if params.get("mixed_precision_accumulation") is False:
            notes.append("--disable-mixed-precision-accumulation exists since Neuron 2.27, where "
                         "mixed-precision accumulation became the default")
        if native and params.get("native_opt_level") is not None and "optlevel" in user_keys:
            notes.append("the optimization level in the exported NEURON_CC_FLAGS was dropped: "
                         "native_opt_level sets it through NEURON_COMPILER_OPT_LEVEL")
        wrapper = [f.key for f in user if f.kind == "wrapper"]
        if native and wrapper:
            notes.append(f"{', '.join(wrapper)} in NEURON_CC_FLAGS are read by the XLA path's "
                         "neuron_cc_wrapper; on the native path they reach neuronx-cc itself")
        return notes

    def cached_plan(self, params: Mapping[str, Any], cache_root: str,
                    base_env: Mapping[str, str] | None = None) -> TrialPlan:
        # Unlike the other targets' caches, the user's own cache location can matter here: an
        # s3:// NEURON_COMPILE_CACHE_URL the user exported is a fleet's shared NEFFs, kept as is.
        plan = self.plan(params, base_env)
        exported = (base_env or {}).get(CACHE_URL_ENV)
        plan.env.update(compile_cache_env(cache_root, package_version("neuronx-cc"), params.get("path", "xla"),
                                          exported))
        if plan.knobs.trace is not None:
            plan.knobs.trace.cache_dir = str(Path(cache_root) / TRACED_CACHE_DIR)
        return plan

    def available(self) -> bool:
        return neuron_present()

    def devices_per_trial(self, cores_per_trial: int = 1, processes: int = 1) -> int:
        # torch-xla under torchrun gives each process its cores: a trial holds them for each.
        return cores_per_trial * processes

    def claim_devices(self, environ: MutableMapping[str, str], ids: Sequence[str] = ()) -> dict[str, str]:
        # Ray sets the variable itself, as a list; its ids of the cores say the same.
        cores = ",".join(ids) or environ.get(VISIBLE_CORES)
        if not cores:
            return {}
        slot = NeuronCoreSlot.parse(cores)
        environ[VISIBLE_CORES] = slot.range
        return {VISIBLE_CORES: slot.range}

    def check_processes(self, nproc: int, devices_per_process: int) -> None:
        if nproc > 1 and devices_per_process > 1:
            raise InvalidConfigError(
                f"--cores-per-trial {devices_per_process} with --nproc-per-node {nproc}: torch-xla under torchrun "
                "gives each process one NeuronCore; use --cores-per-trial 1 (the trial holds one core per process)")

    def rank_envs(self, environ: Mapping[str, str], nproc: int, port: int,
                  master_addr: str | None = None) -> list[dict[str, str]]:
        if nproc == 1 and master_addr is None:
            return [{}]
        cores = environ.get(VISIBLE_CORES)
        return [rank_env(NeuronCoreSlot.parse(cores) if cores else None, nproc, port, master_addr)] * nproc

    def device_description(self) -> str:
        return "neuron" if self.available() else "neuron (no device on this machine)"

    def availability_note(self) -> str | None:
        if self.available():
            return None
        return "no Neuron device or torch_neuronx here: trials run without the Neuron compiler"

    def failed_compile(self, plan: TrialPlan, cache_root: Path) -> str | None:
        entry = failed_entry(cache_root / XLA_CACHE_DIR, plan.compiler_flags)
        if entry is None:
            return None
        return (f"the Neuron compile cache holds a failed compile of these flags ({entry.path.name}); "
                "--retry-failed compiles it again")

    def retry_failed_compile(self, plan: TrialPlan) -> None:
        # Read by neuron_cc_wrapper: without it, a flag set whose compile failed is not tried again.
        plan.env[FLAGS_ENV] = f"{plan.env.get(FLAGS_ENV, '')} --retry_failed_compilation".strip()

    def cache_sections(self, root: Path) -> dict[str, dict[str, Any]]:
        entries = neuron_cache_entries(root / XLA_CACHE_DIR)
        states: dict[str, int] = {}
        for e in entries:
            states[e.state] = states.get(e.state, 0) + 1
        sections: dict[str, dict[str, Any]] = {"neuron-xla": {
            "entries": len(entries),
            **{s: states.get(s, 0) for s in ("done", "failed", "locked", "stale_lock", "incomplete")},
            "bytes": sum(e.size for e in entries)}}
        for d in [*sorted(root.glob("neff-*")), root / TRACED_CACHE_DIR]:
            if d.is_dir():
                files, size = directory_usage(d)
                sections[d.name] = {"files": files, "bytes": size}
        return sections

    def cache_units(self, root: Path) -> list[CacheUnit]:
        # An entry is removed whole, and never from under a running compile.
        units: list[CacheUnit] = [(e.mtime, e.size, e.path) for e in neuron_cache_entries(root / XLA_CACHE_DIR)
                                  if e.state != "locked"]
        return units + file_units([*sorted(root.glob("neff-*")), root / TRACED_CACHE_DIR])

    def compile_cache_persists(self) -> bool:
        return True

    def compile_ahead(self, plan: TrialPlan, platform: str | None = None) -> tuple[TrialPlan, TrialPlan] | None:
        """XLA path: the compile job is the trial under ``neuron_parallel_compile``, which runs it with
        ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (graphs traced, not executed) and then compiles the graphs
        it extracted, in parallel, into the persistent cache (``NEURON_COMPILE_CACHE_URL``). A CPU
        node cannot detect the platform, so both jobs name it in ``--target``: the cache hashes
        the flags as given, and the measure job must ask for exactly what the compile job made.
        The compile job also sets ``NEURON_PLATFORM_TARGET_OVERRIDE``, which the Neuron SDK's
        tools read where no device answers (the value spelled as ``--target``)."""
        if plan.params.get("path", "xla") == "native":
            return None
        measure = plan.model_copy(deep=True)
        family = plan.params.get("target")
        if family is None:
            # The study's platform was checked when its space was chosen (space_name).
            family = (platform_family(platform) if platform else None) or detect_platform()
            measure.env[FLAGS_ENV] = canonical_flags({"target": family}, plan.env.get(FLAGS_ENV, ""))
        job = measure.model_copy(deep=True)
        job.wrapper = [PARALLEL_COMPILE]
        # Off the device, torch-neuronx and the compiler driver cannot ask the hardware what
        # they compile for: the compile job names it, the measure job (on the device) need not.
        job.env[PLATFORM_TARGET_OVERRIDE] = family
        return job, measure

    def compile_job_note(self) -> str:
        return ("the native path compiles at the model's first call, with no documented ahead-of-time "
                "graph extraction: its trials compile in their measure job")

    def versions(self) -> dict[str, str]:
        return {k: v for k in ("torch", "torch-neuronx", "torch-xla", "neuronx-cc")
                if (v := package_version(k))}
