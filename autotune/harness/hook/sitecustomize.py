"""Runs at the start of every Python process of a trial, or of a production run of a tuned
configuration. For a trial, the launcher puts this folder first on the trial's ``PYTHONPATH`` and
names the trial's spec in ``AUTOTUNE_TRIAL_SPEC``; for a production run, ``best.env`` or ``autotune
exec`` put it there and the configuration in ``AUTOTUNE_APPLY`` (``autotune/harness/apply.py``).

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
if os.environ.get("AUTOTUNE_TRIAL_SPEC"):
    if "--multiprocessing-fork" in sys.argv:
        from autotune.harness.spawned import install_in_spawned_workers

        install_in_spawned_workers(os.environ["AUTOTUNE_TRIAL_SPEC"])
elif os.environ.get("AUTOTUNE_APPLY") and os.path.basename(sys.argv[0] if sys.argv else "") != "autotune":
    # autotune's own commands, run from a shell that sourced best.env, tune or inspect: they apply nothing.
    from autotune.harness.apply import install_from_env

    install_from_env()
