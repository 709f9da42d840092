"""Execution: where trials run. Placement on Ray and the pool of Ray workers (:mod:`.scheduler`),
kept apart from choosing configurations (that is :mod:`autotune.search`'s job).

It starts trials through :mod:`autotune.workers` and knows nothing of Optuna or the study.
"""
