"""Runs at the start of every Python process of a trial: the launcher puts this folder first on
the trial's ``PYTHONPATH`` and names the trial's spec in ``AUTOTUNE_TRIAL_SPEC``.

A worker that the script starts with ``spawn`` (``torch_xla.launch``, ``xmp.spawn``,
``torch.multiprocessing.spawn``) is a fresh interpreter that imports the script again: nothing
the harness patched in the parent reaches it. Here it gets the trial's interceptions and becomes a
measured rank before it imports the script again. Other processes (torchrun's agent, whose ranks
run the harness themselves, the resource tracker, a compiler's own workers) are left alone. A
``sitecustomize`` that this file shadows still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_shadowed()
if "--multiprocessing-fork" in sys.argv and os.environ.get("AUTOTUNE_TRIAL_SPEC"):
    from autotune.workers.ranks import install_in_spawned_workers

    install_in_spawned_workers(os.environ["AUTOTUNE_TRIAL_SPEC"])
