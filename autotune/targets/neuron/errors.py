"""What the Neuron compiler and runtime print when a configuration fails, and what it means.

The strings are the documented ones (the Neuron runtime troubleshooting guide, the compiler's
error banners, torch-neuronx's exceptions); the first that matches a trial's log decides its
failure category.
"""

from __future__ import annotations

from autotune.measurement.failures import FailurePattern, failure_pattern
from autotune.records import FailureCategory as C

NEURON_FAILURES: tuple[FailurePattern, ...] = (
    # Neuron compiler (neuronx-cc), as printed through torch-neuronx.
    failure_pattern(r"NCC_EARG\d+", C.invalid_config, "the compiler rejected its arguments"),
    # Printed with and without the estimate, and against a size in GB or in bytes.
    failure_pattern(r"Estimated peak HBM usage(?: \([^)]*\))? exceeds", C.device_oom,
                    "the compiled graph needs more device memory (HBM) than the NeuronCore has"),
    failure_pattern(r"\[F137\] neuronx-cc was forcibly killed", C.host_oom,
                    "the compiler was killed, usually for lack of host memory"),
    failure_pattern(r"neuronx-cc failed with -9\b", C.host_oom, "the compiler was killed (SIGKILL), usually by the OOM killer"),
    # torch-neuronx raises this for any other non-zero compiler exit status.
    failure_pattern(r"neuronx-cc failed with \d+", C.compile_error, "the compiler failed"),
    failure_pattern(r"\[F134\] neuronx-cc terminated abnormally", C.compile_error, "the compiler terminated abnormally"),
    failure_pattern(r"An Internal Compiler Error has occurred", C.compile_error, "internal compiler error"),
    # Neuron runtime.
    failure_pattern(r"Failed to allocate .* on ND \d+:NC \d+", C.device_oom, "out of device memory on a NeuronCore"),
    failure_pattern(r"NeuronCore\(s\) not available - Requested:\S+ Available:\d+", C.device_unavailable,
                    "the NeuronCores this trial was given are held by another process"),
    failure_pattern(r"inference timeout \(\d+ ms\)", C.timeout, "the Neuron runtime timed out executing the graph"),
)
