"""The study: the ask-measure-tell loop that drives a tuning run, and what it keeps.

:mod:`.loop` asks Optuna for configurations, hands them to :mod:`autotune.execution` and tells
the results back; :mod:`.storage` opens the Optuna database; :mod:`.outputs` writes ``best.json``,
``best.env`` and ``trials.csv``; :mod:`.numerics` is the guard against configurations whose losses
diverge. It may import search, execution, targets, space, measurement and the records below it;
never the CLI, the daemon or the landscapes.
"""
