"""What differs between the Optuna releases autotune runs on (4.0 on): the names of the heartbeat's
stale-trial callback, the error that a write to a finished trial raises, and where a trial's
constraint values are kept (its own from Optuna 5.0 on, which the samplers and plots read; before,
an attribute of autotune's that they are handed through ``constraints_func``)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

from autotune.storage.attrs import TrialAttrs, write

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


def stale_trial_callback(callback: Callable[..., None]) -> dict[str, Any]:
    """``RDBStorage``'s argument that calls ``callback`` on each trial failed for a stale heartbeat:
    ``heartbeat_stale_trial_callback`` from Optuna 4.9 on, ``failed_trial_callback`` before."""
    from optuna.storages import RDBStorage

    named = "heartbeat_stale_trial_callback" in inspect.signature(RDBStorage.__init__).parameters
    return {"heartbeat_stale_trial_callback" if named else "failed_trial_callback": callback}


def retry_stale_trial(max_retry: int) -> Callable[..., None]:
    """Optuna's callback that queues a trial failed for a stale heartbeat again, at most
    ``max_retry`` times (``RetryHeartbeatStaleTrialCallback`` from Optuna 4.9 on,
    ``RetryFailedTrialCallback`` before)."""
    import optuna

    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or \
        optuna.storages.RetryFailedTrialCallback
    return retry(max_retry=max_retry)


def finished_already(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna's refusal to change a finished trial (``UpdateFinishedTrialError``
    from Optuna 4.3 on, a ``RuntimeError`` that says so before)."""
    import optuna

    refused = getattr(optuna.exceptions, "UpdateFinishedTrialError", None)
    if refused is not None:
        return isinstance(exc, refused)
    return isinstance(exc, RuntimeError) and "has already finished" in str(exc)


def tell_constraints(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Give the running ``trial`` these constraint values (above 0: broken)."""
    if hasattr(trial, "set_constraint"):
        for key, value in values.items():
            trial.set_constraint(key, value)
    else:
        write(trial, constraints={**(TrialAttrs.of(trial).constraints or {}), **values})


def constraints_of(trial: FrozenTrial) -> dict[str, float]:
    """A finished trial's constraint values, as :func:`tell_constraints` gave them (under whichever
    Optuna told it: a study continued after an upgrade keeps its earlier trials' values)."""
    return {**(TrialAttrs.of(trial).constraints or {}), **(getattr(trial, "constraints", None) or {})}


def constrained() -> dict[str, Any]:
    """What Optuna's TPE sampler and Pareto-front plot are handed to read the trials' constraint
    values: nothing from Optuna 5.0 on, ``constraints_func`` before."""
    from optuna.trial import FrozenTrial

    return {} if hasattr(FrozenTrial, "constraints") else {"constraints_func": _constraint_values}


def _constraint_values(trial: FrozenTrial) -> list[float]:
    return list(constraints_of(trial).values())
