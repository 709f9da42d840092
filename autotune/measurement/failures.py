"""Failure categories from the strings that compilers, runtimes and the OS really print.

The patterns are checked in order against the tail of a trial's log (and the exception that ended
the script); the first that matches decides the category. Exit codes and signals that say more
than any log line (a kill by the memory watchdog, a timeout) are decided by the launcher first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.records import Failure, FailureCategory as C


@dataclass(frozen=True)
class FailurePattern:
    pattern: re.Pattern[str]
    category: C
    reason: str


def _p(regex: str, category: C, reason: str) -> FailurePattern:
    return FailurePattern(re.compile(regex), category, reason)


PATTERNS: tuple[FailurePattern, ...] = (
    # Neuron compiler (neuronx-cc), as printed through torch-neuronx.
    _p(r"NCC_EARG\d+", C.invalid_config, "the compiler rejected its arguments"),
    # Printed with and without the estimate, and against a size in GB or in bytes.
    _p(r"Estimated peak HBM usage(?: \([^)]*\))? exceeds", C.device_oom,
       "the compiled graph needs more device memory (HBM) than the NeuronCore has"),
    _p(r"\[F137\] neuronx-cc was forcibly killed", C.host_oom,
       "the compiler was killed, usually for lack of host memory"),
    _p(r"neuronx-cc failed with -9\b", C.host_oom, "the compiler was killed (SIGKILL), usually by the OOM killer"),
    # torch-neuronx raises this for any other non-zero compiler exit status.
    _p(r"neuronx-cc failed with \d+", C.compile_error, "the compiler failed"),
    _p(r"\[F134\] neuronx-cc terminated abnormally", C.compile_error, "the compiler terminated abnormally"),
    _p(r"An Internal Compiler Error has occurred", C.compile_error, "internal compiler error"),
    # Neuron runtime.
    _p(r"Failed to allocate .* on ND \d+:NC \d+", C.device_oom, "out of device memory on a NeuronCore"),
    _p(r"NeuronCore\(s\) not available - Requested:\S+ Available:\d+", C.device_unavailable,
       "the NeuronCores this trial was given are held by another process"),
    _p(r"inference timeout \(\d+ ms\)", C.timeout, "the Neuron runtime timed out executing the graph"),
    # XLA.
    _p(r"RESOURCE_EXHAUSTED", C.device_oom, "XLA ran out of device memory"),
    _p(r"Unknown flags? in XLA_FLAGS", C.compile_error, "XLA_FLAGS holds a flag this XLA does not know"),
    # XLA:CPU's LLVM back end gave up on the graph (seen with --xla_cpu_use_thunk_runtime=false).
    _p(r"LLVM ERROR:", C.compile_error, "the XLA CPU back end (LLVM) failed to compile the graph"),
    # torch.compile / inductor.
    _p(r"torch\._dynamo\.exc\.(BackendCompilerFailed|InternalTorchDynamoError)|InductorError|CppCompileError",
       C.compile_error, "torch.compile failed to compile the model"),
    _p(r"torch\._dynamo\.exc\.(Unsupported|UserError)", C.compile_error,
       "torch.compile could not capture the model (fullgraph needs one graph)"),
    _p(r"CUDA out of memory|OutOfMemoryError", C.device_oom, "out of GPU memory"),
    # Host.
    _p(r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory", C.host_oom, "out of host memory"),
)


def classify_text(text: str) -> FailurePattern | None:
    """The first known failure pattern found in ``text``."""
    for fp in PATTERNS:
        if fp.pattern.search(text):
            return fp
    return None


def classify(text: str, *, default: C, default_reason: str, exit_code: int | None = None,
             signal: str | None = None) -> Failure:
    """A :class:`Failure` for a trial whose log (or exception) is ``text``."""
    found = classify_text(text)
    if found is not None:
        return Failure(category=found.category, reason=found.reason, exit_code=exit_code, signal=signal)
    return Failure(category=default, reason=default_reason, exit_code=exit_code, signal=signal)
