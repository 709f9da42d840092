"""The model's FLOPs per sample, counted inside the trial process without touching its run.

Counted once, at the model's first call (in warm-up, before any timing window), by torch's
``FlopCounterMode`` on the same module called with every parameter, buffer and input replaced by a
tensor on the ``meta`` device: shapes without data. Nothing runs on the trial's device, no graph is
traced into its lazy queue (XLA), no weight or running statistic changes, and the count costs what
a Python pass over the model costs. A loop that trains (gradients on, parameters that take them) is
counted forward and backward (the gradients of the parameters, as its ``backward()`` computes them).
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def model_flops_per_sample(module: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, Any],
                           samples: int | None) -> float | None:
    """FLOPs of one call of ``module`` on ``args``/``kwargs`` (and of its backward where the loop
    trains) per sample of the call's ``samples``; ``None`` where the model cannot run without data
    (a forward that reads a value, ``.item()``, or makes tensors on a device of its own)."""
    import torch
    from torch.func import functional_call
    from torch.utils._pytree import tree_leaves, tree_map
    from torch.utils.flop_counter import FlopCounterMode

    if not samples:
        return None
    inner = getattr(module, "module", None)
    if isinstance(module, torch.nn.parallel.DistributedDataParallel) and inner is not None:
        module = inner  # its forward also syncs buffers across ranks: the count must not

    def shape_only(x: object) -> object:
        return torch.empty_like(x, device="meta") if isinstance(x, torch.Tensor) else x

    params = {n: torch.empty_like(p, device="meta").requires_grad_(p.requires_grad) for n, p in module.named_parameters()}
    state = {**params, **{n: shape_only(b) for n, b in module.named_buffers()}}
    trained = [p for p in params.values() if p.requires_grad]
    training = torch.is_grad_enabled() and bool(trained)
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            out = functional_call(module, state, tree_map(shape_only, args), tree_map(shape_only, kwargs))
            outputs = [t for t in tree_leaves(out)
                       if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
            if training and outputs:
                # Not Tensor.backward(): the harness counts a call of it as a training step.
                torch.autograd.grad(functools.reduce(operator.add, (t.sum() for t in outputs)), trained,
                                    allow_unused=True)
    except Exception:  # any model that needs its data to run: no count, and the trial goes on
        return None
    total = counter.get_total_flops()
    return total / samples if total else None
