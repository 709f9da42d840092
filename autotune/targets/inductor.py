"""``torch.compile`` with the inductor backend, on CPU here and on CUDA where a GPU exists.

Knobs: the compile mode (``eager`` included: on a CPU, eager can win), ``fullgraph``, ``dynamic``,
selected inductor options, autocast dtype, and the data loader's batch size and workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, MutableMapping, Sequence

from autotune.errors import InvalidConfigError
from autotune.measurement.failures import FailurePattern, failure_pattern
from autotune.records import CompileSpec, TrialPlan
from autotune.records import FailureCategory as C
from autotune.targets.base import CacheUnit, Target, common_knobs, directory_usage, file_units, package_version
from autotune.targets.gpus import GPU_RESOURCE, VISIBLE_DEVICES, claim_gpus, cuda_gpus

#: The folder of the cache root that is TORCHINDUCTOR_CACHE_DIR.
CACHE_DIR = "inductor"
#: A folder of the caller's own for TORCHINDUCTOR_CACHE_DIR instead of the cache root's.
SHARED_CACHE_ENV = "AUTOTUNE_INDUCTOR_CACHE"

MODES = ("eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: Space parameters that are inductor config options, and the option each sets.
INDUCTOR_OPTIONS: dict[str, str] = {
    "freezing": "freezing",
    "coordinate_descent_tuning": "coordinate_descent_tuning",
    "cpp_simdlen": "cpp.simdlen",
    "epilogue_fusion": "epilogue_fusion",
}

AUTOCAST = {"bf16_autocast": "bfloat16", "fp16_autocast": "float16"}
_COMPILE_PARAMS = ("fullgraph", "dynamic", *INDUCTOR_OPTIONS)


#: What torch.compile prints when a configuration fails.
INDUCTOR_FAILURES: tuple[FailurePattern, ...] = (
    failure_pattern(r"torch\._dynamo\.exc\.(BackendCompilerFailed|InternalTorchDynamoError)|InductorError|CppCompileError",
                    C.compile_error, "torch.compile failed to compile the model"),
    failure_pattern(r"torch\._dynamo\.exc\.(Unsupported|UserError)", C.compile_error,
                    "torch.compile could not capture the model (fullgraph needs one graph)"),
)


class InductorTarget(Target):
    name = "inductor"
    failure_patterns = INDUCTOR_FAILURES
    spaces = ("inductor",)
    environment = (VISIBLE_DEVICES,)
    device_noun = "GPUs"
    device_flag = "--gpus-per-trial"
    visible_devices = VISIBLE_DEVICES

    def __init__(self, gpus_per_trial: int | None = None) -> None:
        """On CUDA (a GPU that CUDA sees here) a trial holds ``gpus_per_trial`` GPUs, one by
        default; on a CPU none, unless ``--gpus-per-trial`` asks for them (a driver without a GPU
        whose Ray cluster has them)."""
        super().__init__()
        #: GPUs each trial holds: Ray's ``GPU`` resource where above 0; the trials share the host's
        #: CPUs (and whatever GPU the script finds) at 0.
        self.gpus_per_trial = gpus_per_trial if gpus_per_trial is not None else min(1, cuda_gpus(os.environ))
        self.device_resource = GPU_RESOURCE if self.gpus_per_trial else None

    def devices_per_trial(self, cores_per_trial: int = 1, processes: int = 1) -> int:
        # The trial's GPUs, whatever its processes: each rank sees all of them (targets/gpus.py).
        return self.gpus_per_trial

    def claim_devices(self, environ: MutableMapping[str, str], ids: Sequence[str] = ()) -> dict[str, str]:
        return claim_gpus(environ, ids)

    def check(self, params: Mapping[str, Any]) -> None:
        mode = params.get("mode")
        if mode is not None and mode not in MODES:
            raise InvalidConfigError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "eager":
            given = [p for p in _COMPILE_PARAMS if params.get(p) is not None]
            if given:
                raise InvalidConfigError(
                    f"{', '.join(given)} only apply when the model is compiled; "
                    "remove them or choose a mode other than eager"
                )
        precision = params.get("precision")
        if precision not in (None, "fp32", *AUTOCAST):
            raise InvalidConfigError(f"precision {precision!r} is not one of fp32, {', '.join(AUTOCAST)}")

    def plan(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> TrialPlan:
        self.check(params)
        knobs = common_knobs(params)
        mode = params.get("mode")
        options = {INDUCTOR_OPTIONS[k]: params[k] for k in INDUCTOR_OPTIONS if params.get(k) is not None}
        if mode == "eager":
            knobs.compile = CompileSpec(backend="eager")
        elif mode is not None or options or any(params.get(p) is not None for p in ("fullgraph", "dynamic")):
            knobs.compile = CompileSpec(
                backend="inductor",
                mode=None if mode in (None, "default") else mode,
                fullgraph=bool(params.get("fullgraph", False)),
                dynamic=params.get("dynamic"),
                options=options,
            )
        if params.get("precision") in AUTOCAST:
            knobs.autocast_dtype = AUTOCAST[params["precision"]]
        notes = []
        if params.get("freezing"):
            notes.append("freezing only changes inference graphs; a training step is unaffected")
        return TrialPlan(target=self.name, params=dict(params), env={}, knobs=knobs, notes=notes)

    def cache_env(self, root: str, params: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
        # One shared directory: a second process's first compiled step loads its kernels from it, far
        # sooner than from torch.compiler's mega-cache on CPU (docs/results/trial.md#inductors-compile-cache).
        return {"TORCHINDUCTOR_CACHE_DIR": f"{root}/{CACHE_DIR}"}, []

    def cached_plan(self, params: Mapping[str, Any], cache_root: str,
                    base_env: Mapping[str, str] | None = None) -> TrialPlan:
        # Compiled kernels depend on the graph, the compiler and the CPU, not on the script's
        # results: one folder can serve several cache roots (a fleet's shared disk, a machine's
        # every study) where the results must stay apart. Its folder is the caller's to manage:
        # `autotune cache` counts and clears only the root's.
        plan = super().cached_plan(params, cache_root, base_env)
        if shared := (base_env or {}).get(SHARED_CACHE_ENV):
            plan.env["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(os.path.expanduser(shared))
        return plan

    def compile_ahead(self, plan: TrialPlan, platform: str | None = None) -> tuple[TrialPlan, TrialPlan] | None:
        job = plan.model_copy(deep=True)
        # Inductor compiles its kernels in a pool of worker processes, one per core by default: a
        # compile job keeps to the one thread its worker holds.
        job.env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        return job, plan

    def cache_sections(self, root: Path) -> dict[str, dict[str, Any]]:
        files, size = directory_usage(root / CACHE_DIR)
        return {CACHE_DIR: {"files": files, "bytes": size}}

    def cache_units(self, root: Path) -> list[CacheUnit]:
        return file_units([root / CACHE_DIR])

    def compile_cache_persists(self) -> bool:
        return True

    def versions(self) -> dict[str, str]:
        return {k: v for k in ("torch",) if (v := package_version(k))}
