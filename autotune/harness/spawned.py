"""A worker the script starts itself with ``spawn`` (``torch_xla.launch``, ``xmp.spawn``,
``torch.multiprocessing.spawn``), made a measured rank of the trial: a fresh interpreter that
imports the script again, which nothing the harness patched in the parent reaches.
``hook/sitecustomize.py`` calls :func:`install_in_spawned_workers` in every such process.
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path
from typing import Any

from autotune.records import TrialSpec
from autotune.harness.ranks import report_path


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
    # Here, not at the top: every process a trial spawns imports this module (a DataLoader's
    # worker, a compiler's), and only a worker of the script needs the harness.
    from autotune import api
    from autotune.harness.ending import write_report
    from autotune.harness.trial_process import TrialRuntime

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
