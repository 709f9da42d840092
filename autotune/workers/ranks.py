"""The ranks of a multi-process trial, from inside one of them: which rank this process is, the env
vars it alone gets, where it writes its report, and how long it waits for the others.

A trial of several processes is either started through torchrun (each rank runs the harness) or
starts its workers itself (``torch_xla.launch``, ``xmp.spawn``, ``torch.multiprocessing.spawn``:
children started with ``spawn``, which the hook in ``hook/sitecustomize.py`` turns into measured
ranks). Each rank writes its own :class:`~autotune.records.HarnessReport` into the trial's
``ranks`` folder; the launcher adds them up.
"""

from __future__ import annotations

import datetime
import inspect
import os
import time
from pathlib import Path
from typing import Any

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

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments.get("timeout")
        bound.arguments["timeout"] = cap if given is None else min(given, cap)
        return orig(*bound.args, **bound.kwargs)

    dist.init_process_group = init_process_group


def install_in_spawned_workers(spec_path: str) -> None:
    """In a process started with ``spawn``: become a rank of the trial if, and only if, the process
    is about to import the trial's script (a worker of ``torch_xla.launch``, ``xmp.spawn``,
    ``torch.multiprocessing.spawn``), not for any other spawned process of the trial (a compiler's).

    ``multiprocessing.spawn.prepare`` is what such a worker calls with its parent's main module
    before it imports it and runs its function.
    """
    import multiprocessing.spawn as spawn

    orig = spawn.prepare

    def prepare(data: dict[str, Any]) -> None:
        spec = TrialSpec.model_validate_json(Path(spec_path).read_text())
        main = data.get("init_main_from_path")
        if main and Path(main).resolve() == Path(spec.script).resolve():
            install_in_child(spec)
        orig(data)

    spawn.prepare = prepare


def install_in_child(spec: TrialSpec) -> None:
    """Measure a worker process the script started itself with ``spawn`` (``torch_xla.launch``,
    ``xmp.spawn``, ``torch.multiprocessing.spawn``) as one rank of the trial: the trial's
    interceptions go in before the worker imports the script again, and its report is written when
    it exits, if it took any step."""
    import atexit

    from autotune import api
    from autotune.workers.ending import write_report
    from autotune.workers.harness import TrialRuntime

    runtime = TrialRuntime(spec, is_rank=True, spawned=True)
    api._install(runtime)
    runtime.install()
    runtime.started_at = time.perf_counter()

    def write() -> None:
        if runtime.clock.steps:
            runtime.report.finished = True
            runtime.report.stopped_early = runtime.clock.stopped
            write_report(runtime, report_path(spec, is_rank=True))

    atexit.register(write)
