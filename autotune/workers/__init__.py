"""The trial side: the Ray worker (``ray_worker.py``), the process launcher (``launcher.py``) and
what runs inside the user's process: the harness (``harness.py``), its step clock
(``step_clock.py``), the backends' counters (``backends.py``) and tensor helpers (``tensors.py``),
and a worker the script spawns made one of the trial's ranks (``spawned.py``).

It may import targets, measurement, records and the small helpers below them; the in-process
part never imports Optuna, Ray or the driver's parts (an import-linter contract).
"""
