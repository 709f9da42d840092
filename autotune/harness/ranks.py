"""The ranks of a multi-process trial, from inside one of them: which rank this process is, the env
vars it alone gets, where it writes its report, and how long it waits for the others.

A trial of several processes is either started through torchrun (each rank runs the harness) or
starts its workers itself (``torch_xla.launch``, ``xmp.spawn``, ``torch.multiprocessing.spawn``:
children started with ``spawn``, which the hook in ``hook/sitecustomize.py`` turns into measured
ranks, :mod:`autotune.harness.spawned`). Each rank writes its own
:class:`~autotune.records.HarnessReport` into the trial's ``ranks`` folder; the launcher adds them up.
"""

from __future__ import annotations

import datetime
import inspect
import os
from pathlib import Path

from autotune.records import TrialSpec

#: The env var that names the trial's spec in every process of the trial.
SPEC_ENV = "AUTOTUNE_TRIAL_SPEC"


def process_rank() -> int | None:
    """This process's rank: torchrun's ``RANK``, or the local rank torch-xla gives a spawned child."""
    for var in ("RANK", "PJRT_LOCAL_PROCESS_RANK"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def is_torchrun_rank(spec: TrialSpec) -> bool:
    return spec.plan.launch is not None and "LOCAL_RANK" in os.environ


def apply_rank_env(spec: TrialSpec) -> None:
    """The env vars of this local rank (its NeuronCores), before any backend reads them."""
    os.environ.update(spec.rank_env.get(os.environ.get("LOCAL_RANK", ""), {}))


def report_path(spec: TrialSpec, is_rank: bool) -> Path:
    """Where this process writes its report: the trial's own file, or one per rank."""
    if is_rank and spec.ranks_dir:
        return Path(spec.ranks_dir) / f"rank-{os.getpid()}.json"
    return Path(spec.result_path)


def cap_rendezvous(seconds: float) -> None:
    """``init_process_group`` waits at most ``seconds`` for the other ranks (its ``timeout``)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    orig = dist.init_process_group
    signature = inspect.signature(orig)
    cap = datetime.timedelta(seconds=seconds)

    def init_process_group(*args: object, **kwargs: object) -> None:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments.get("timeout")
        bound.arguments["timeout"] = cap if given is None else min(given, cap)
        return orig(*bound.args, **bound.kwargs)

    dist.init_process_group = init_process_group
