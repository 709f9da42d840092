"""torch-xla on any PJRT device (CPU here; TPU and GPU where present).

Knobs: the data loader's batch size and workers, the precision (fp32, bf16 by casting the model,
bf16 by ``torch.autocast("xla")``, or the deprecated ``XLA_USE_BF16``), ``MpDeviceLoader``'s
``batches_per_execution``, ``torch.compile(backend="openxla")``, and ``XLA_FLAGS`` options.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from autotune.errors import InvalidConfigError, MissingPackageError
from autotune.measurement.failures import FailurePattern, failure_pattern
from autotune.records import CompileSpec, TrialPlan
from autotune.records import FailureCategory as C
from autotune.targets.base import CacheUnit, Target, common_knobs, directory_usage, file_units, package_version

#: Boolean space parameters and the XLA flag each sets, in the canonical order of XLA_FLAGS.
XLA_BOOL_FLAGS: dict[str, str] = {
    "fast_math": "--xla_cpu_enable_fast_math",
    "xnnpack": "--xla_cpu_use_xnnpack",
    "multi_thread_eigen": "--xla_cpu_multi_thread_eigen",
    "fusion_emitters": "--xla_cpu_use_fusion_emitters",
    "disable_expensive_passes": "--xla_llvm_disable_expensive_passes",
    "thunk_runtime": "--xla_cpu_use_thunk_runtime",
}
OPT_LEVEL_FLAG = "--xla_backend_optimization_level"

PRECISIONS = ("fp32", "bf16_model", "bf16_autocast", "xla_use_bf16")
#: torch-xla needs exactly its own torch version; the ``cpu`` extra pins the pair that works here.
TORCH_XLA_INSTALL = "pip install torch==2.9.0 torch-xla==2.9.0 (or, in a checkout: pip install -e \".[cpu]\")"


def xla_flags(params: Mapping[str, Any]) -> list[str]:
    """The ``XLA_FLAGS`` entries for ``params``, in canonical order."""
    flags = []
    if params.get("backend_opt_level") is not None:
        flags.append(f"{OPT_LEVEL_FLAG}={int(params['backend_opt_level'])}")
    for name, flag in XLA_BOOL_FLAGS.items():
        if params.get(name) is not None:
            flags.append(f"{flag}={'true' if params[name] else 'false'}")
    return flags


#: What torch-xla adds to ``XLA_FLAGS`` itself, at its import, where the flag is missing
#: (``torch_xla/__init__.py``): with it or without it, the same run.
TORCH_XLA_OWN_FLAGS = ("--xla_cpu_enable_fast_math=false",)


def user_flags(value: str) -> str:
    """``XLA_FLAGS`` without what torch-xla adds itself: a process that imported torch-xla (a
    driver, a test) reads the user's flags, not its own additions."""
    return " ".join(f for f in value.split() if f not in TORCH_XLA_OWN_FLAGS)


def merge_flag_string(user_flags: str, ours: list[str]) -> str:
    """Append ``ours`` to the flags the user already exported, ours replacing the user's same flag."""
    names = {f.split("=", 1)[0] for f in ours}
    kept = [f for f in user_flags.split() if f.split("=", 1)[0] not in names]
    return " ".join(kept + ours)


#: What XLA prints when a configuration fails.
XLA_FAILURES: tuple[FailurePattern, ...] = (
    failure_pattern(r"RESOURCE_EXHAUSTED", C.device_oom, "XLA ran out of device memory"),
    failure_pattern(r"Unknown flags? in XLA_FLAGS", C.compile_error, "XLA_FLAGS holds a flag this XLA does not know"),
    # XLA:CPU's LLVM back end gave up on the graph (seen with --xla_cpu_use_thunk_runtime=false).
    failure_pattern(r"LLVM ERROR:", C.compile_error, "the XLA CPU back end (LLVM) failed to compile the graph"),
)


class XlaTarget(Target):
    name = "xla"
    failure_patterns = XLA_FAILURES
    spaces = ("xla",)
    environment = ("PJRT_DEVICE", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES")
    spellings = (OPT_LEVEL_FLAG, *XLA_BOOL_FLAGS.values())

    def check(self, params: Mapping[str, Any]) -> None:
        precision = params.get("precision")
        if precision is not None and precision not in PRECISIONS:
            raise InvalidConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        bpe = params.get("batches_per_execution")
        if bpe is not None and bpe < 1:
            raise InvalidConfigError("batches_per_execution must be at least 1")
        if params.get("openxla") and bpe not in (None, 1):
            raise InvalidConfigError(
                "openxla compiles each step's graph itself; batches_per_execution > 1 does not apply "
                "to it (set one of them only)"
            )

    def plan(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> TrialPlan:
        self.check(params)
        base_env = base_env or {}
        env: dict[str, str] = {}
        notes: list[str] = []
        knobs = common_knobs(params)
        knobs.lazy_device = True
        knobs.batches_per_execution = params.get("batches_per_execution")

        if "PJRT_DEVICE" not in base_env:
            env["PJRT_DEVICE"] = "CPU"
            notes.append("PJRT_DEVICE was unset: using CPU")
        precision = params.get("precision")
        if precision == "bf16_model":
            knobs.model_dtype = "bfloat16"
        elif precision == "bf16_autocast":
            knobs.autocast_device, knobs.autocast_dtype = "xla", "bfloat16"
        elif precision == "xla_use_bf16":
            env["XLA_USE_BF16"] = "1"
            notes.append("XLA_USE_BF16 is deprecated in torch-xla; prefer bf16_model or bf16_autocast")
        if params.get("openxla"):
            knobs.compile = CompileSpec(backend="openxla")

        ours = xla_flags(params)
        if ours:
            env["XLA_FLAGS"] = merge_flag_string(user_flags(base_env.get("XLA_FLAGS", "")), ours)
        return TrialPlan(target=self.name, params=dict(params), env=env,
                         flags_env="XLA_FLAGS" if ours else None, knobs=knobs, notes=notes)

    def result_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The caller's variables as a trial sees them: ``PJRT_DEVICE=CPU`` is what the plan sets
        where it is unset, and torch-xla's own additions to ``XLA_FLAGS`` are no flags of the
        user's (torch-xla writes both into the environment of any process that imports it or asks
        for a device)."""
        env = super().result_env(environ)
        if "XLA_FLAGS" in env:
            env["XLA_FLAGS"] = user_flags(env["XLA_FLAGS"])
            if not env["XLA_FLAGS"]:
                del env["XLA_FLAGS"]
        if env.get("PJRT_DEVICE", "").upper() == "CPU":
            del env["PJRT_DEVICE"]
        return env

    def cache_env(self, root: str, params: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
        device = os.environ.get("PJRT_DEVICE", "CPU").upper()
        if device == "CPU":
            # Measured here: torch-xla 2.9 writes its persistent cache on CPU but cannot read it
            # back ("Deserializing serialized executable not supported").
            return {}, ["XLA:CPU cannot read back torch-xla's persistent cache: every trial compiles"]
        return {"XLA_PERSISTENT_CACHE_PATH": f"{root}/xla-{device.lower()}"}, []

    def compile_job_note(self) -> str:
        return ("XLA:CPU cannot read back torch-xla's persistent cache: a configuration compiled ahead "
                "would be compiled again by its measurement, so --compile-workers is not used on PJRT_DEVICE=CPU")

    def available(self) -> bool:
        from importlib.util import find_spec

        return find_spec("torch_xla") is not None

    def device_description(self) -> str:
        return f"xla:{os.environ.get('PJRT_DEVICE', 'CPU')}"

    def cache_sections(self, root: Path) -> dict[str, dict[str, Any]]:
        sections = {}
        for d in sorted(root.glob("xla-*")):
            files, size = directory_usage(d)
            sections[d.name] = {"files": files, "bytes": size}
        return sections

    def cache_units(self, root: Path) -> list[CacheUnit]:
        return file_units(sorted(root.glob("xla-*")))

    def compile_cache_persists(self) -> bool:
        # XLA on CPU writes its persistent cache but cannot read it back (measured here).
        return os.environ.get("PJRT_DEVICE", "CPU").upper() != "CPU"

    def require(self) -> None:
        if not self.available():
            raise MissingPackageError("torch-xla", "the xla target", TORCH_XLA_INSTALL)

    def versions(self) -> dict[str, str]:
        return {k: v for k in ("torch", "torch-xla") if (v := package_version(k))}
