"""The driver's copy of its studies' trials: what a read of the trial table costs stays the same
however many trials the study holds.

The loop, the claims, the budget check, the sampler and the reports each ask Optuna for the study's
trials, about fifteen times per trial. Optuna's ``_CachedStorage`` already reads only what changed
since its last look (the trials it has not seen finished: a finished trial never changes), but
then sorts every trial it holds on every call, and each ``optuna.create_study`` /
``load_study`` on a plain ``RDBStorage`` wraps it in a cache of its own, which starts empty: the
whole table again. :class:`TrialCache` is one such cache for all the studies a driver opens on one
database, that keeps each study's trials in a list by number, so that answering a read costs a
copy of that list, not a sort.
"""

from __future__ import annotations

import copy
from collections.abc import Container
from typing import TYPE_CHECKING, cast

from optuna.storages import _CachedStorage

if TYPE_CHECKING:
    from autotune.storage.reconnecting import ReconnectingStorage
    import sqlalchemy as sa
    from optuna.trial import FrozenTrial, TrialState


class TrialCache(_CachedStorage):
    """Optuna's cached storage over ``backend``, with each study's trials kept in number order."""

    def __init__(self, backend: ReconnectingStorage) -> None:
        super().__init__(backend)
        #: When the database did not answer (its calls wait for it).
        self.outages = backend.outages
        # Study id -> its trials, trial ``n`` at index ``n``; ``None`` where a trial with that
        # number exists but was not read yet (another driver's, created after this driver's
        # last look and before its own newest).
        self._ordered: dict[int, list[FrozenTrial | None]] = {}
        self._holes: dict[int, int] = {}

    @property
    def engine(self) -> sa.Engine:
        """The database's engine, for autotune's own tables beside Optuna's (the claims)."""
        return self._backend.engine

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        self._read_trials_from_remote_storage(study_id)
        with self._lock:
            ordered = self._ordered.get(study_id, [])
            if states is None and not self._holes.get(study_id):
                trials = cast("list[FrozenTrial]", list(ordered))  # no holes: no None in it
            else:
                trials = [t for t in ordered if t is not None and (states is None or t.state in states)]
            return copy.deepcopy(trials) if deepcopy else trials

    def _add_trials_to_cache(self, study_id: int, trials: list[FrozenTrial]) -> None:
        super()._add_trials_to_cache(study_id, trials)
        ordered = self._ordered.setdefault(study_id, [])
        for trial in trials:
            if trial.number >= len(ordered):
                self._holes[study_id] = self._holes.get(study_id, 0) + trial.number - len(ordered)
                ordered.extend([None] * (trial.number + 1 - len(ordered)))
            elif ordered[trial.number] is None:
                self._holes[study_id] -= 1
            ordered[trial.number] = trial

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self._ordered.pop(study_id, None)
            self._holes.pop(study_id, None)
        super().delete_study(study_id)
