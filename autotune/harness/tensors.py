"""Small facts about the tensors a script passes around: a batch's sample count, a call's input
dtype, floats cast to another precision. torch is imported inside each function: the harness
imports this module before the script has loaded torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

if TYPE_CHECKING:
    import torch


def to_float(t: torch.Tensor) -> float | None:
    try:
        return float(t.float().cpu().item()) if hasattr(t, "cpu") else float(t)
    except Exception:
        return None


def batch_len(batch: object) -> int | None:
    """The number of samples in a batch: the leading dim of its first tensor."""
    stack = [batch]
    while stack:
        item = stack.pop(0)
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def input_dtype(args: tuple, kwargs: dict) -> torch.dtype | None:
    """The dtype of the first floating tensor among a call's arguments."""
    import torch

    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.dtype
    return None


def cast_floats(value: object, dtype: torch.dtype | None) -> object:
    """``value`` with its floating tensors (in tuples, lists, dicts) cast to ``dtype``.

    The model runs in low precision, but the script computes its loss outside the model against
    targets of the original dtype, as it did before; outputs go back to the inputs' dtype so that
    such a loss (``mse_loss(out, y)``) and its backward work unchanged.
    """
    import torch

    if dtype is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        # A namedtuple takes its fields one by one, not the one iterable a tuple takes.
        return cast("Callable[..., object]", type(value))(*(cast_floats(v, dtype) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return type(value)({k: cast_floats(v, dtype) for k, v in value.items()})
    return value


def module_device_type(module: torch.nn.Module) -> str:
    p = next(module.parameters(), None)
    return p.device.type if p is not None else "cpu"
