"""What the trial's compilers and devices say about themselves: when the device is idle, how many
graphs were compiled, how long compiling took, and what the compile cache answered.

Each backend is asked only if the script loaded it: the harness never imports torch_xla or
dynamo for a script that does not use them.
"""

from __future__ import annotations

import sys
from typing import Any


class Backends:
    """The compile and device counters of the backends a script loaded."""

    def __init__(self) -> None:
        #: ``torch_xla.core.xla_model`` once the harness has hooked torch-xla.
        self.xla: Any = None

    def wait_device(self) -> None:
        if self.xla is not None:
            import torch_xla

            # Only a runtime the script started: waiting would otherwise start one (and pick a
            # device) for a script that never touched XLA.
            # torch-xla has no public check of this; its own code asks _XLAC too.
            if torch_xla._XLAC._xla_runtime_is_initialized():  # pyright: ignore[reportPrivateImportUsage]
                self.xla.wait_device_ops()
        elif "torch" in sys.modules:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()

    def compiled_graphs(self) -> int:
        total = 0
        if "torch_xla" in sys.modules:
            import torch_xla.debug.metrics as met

            total += met.counter_value("UncachedCompile") or 0
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import counters

            total += counters["stats"].get("unique_graphs", 0)
        return total

    def compile_seconds(self) -> float | None:
        seconds = None
        if "torch_xla" in sys.modules:
            import torch_xla.debug.metrics as met

            data = met.metric_data("CompileTime")
            if data:
                seconds = (seconds or 0.0) + data[1] / 1e9
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import calculate_time_spent

            # A training graph's backward is compiled at its first backward() call, outside
            # the frame compile; a cache hit loads both at the first forward.
            times = calculate_time_spent()
            spent = times.get("entire_frame_compile", 0.0) + times.get("entire_backward_compile", 0.0)
            if spent:
                seconds = (seconds or 0.0) + spent
        return seconds

    def cache_counts(self) -> tuple[int | None, int | None]:
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import counters

            ind = counters["inductor"]
            hits, misses = ind.get("fxgraph_cache_hit", 0), ind.get("fxgraph_cache_miss", 0)
            if hits or misses:
                return hits, misses
        return None, None
