"""Which trial measures a configuration, and whether a trial is within ``--trials``, when several
drivers share one study.

Drivers on one study can ask for the same configuration at the same moment: both enqueue the
baseline when they start together, and a sampler that skips configurations in flight sees another
driver's only once that driver has written its key. So a configuration is claimed before it is
measured, by inserting (study, configuration) into a table of the study's own database: its primary
key lets exactly one insert win, on SQLite and PostgreSQL alike, where reading Optuna's attributes
first and writing after would let both win. A claim whose trial ended for its driver's sake
(killed: failed by its stale heartbeat, never counted) passes to the trial that runs the
configuration again, by a compare-and-set on the holder.

``--trials N`` is N for the study: a trial asked for when the trials before it (by number,
which Optuna hands out one at a time) already fill N is not run (:func:`trials_filled`).
"""

from __future__ import annotations

import bisect
import hashlib
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from autotune.storage.optuna_storage import create_schema
from autotune.storage.attrs import TrialAttrs, counts
from autotune.storage.trial_cache import trials_of

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from autotune.storage.trial_cache import TrialCache

_metadata = sa.MetaData()
claims_table = sa.Table(
    "autotune_claims", _metadata,
    sa.Column("study_id", sa.Integer, primary_key=True),
    # A digest: a configuration's key can be longer than some databases index.
    sa.Column("config_digest", sa.String(64), primary_key=True),
    sa.Column("trial_number", sa.Integer, nullable=False),
)


class Claims:
    """The claims of one study in the database of its Optuna ``storage``."""

    def __init__(self, storage: TrialCache, study: optuna.Study, url: str) -> None:
        self.engine = storage.engine
        self.outages = storage.outages
        self.storage = storage
        self.study_id: int = storage.get_study_id_from_name(study.study_name)
        create_schema(url, lambda: _metadata.create_all(self.engine))

    def holder(self, key: str, number: int) -> FrozenTrial | None:
        """``None`` when trial ``number`` may measure the configuration ``key`` (it holds the
        claim now); otherwise the trial that holds it (running, or finished and counted). Waits
        for a database that restarts (:mod:`autotune.storage.reconnecting`)."""
        return self.outages.call(self._holder, key, number)

    def _holder(self, key: str, number: int) -> FrozenTrial | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        where = sa.and_(claims_table.c.study_id == self.study_id, claims_table.c.config_digest == digest)
        for _ in range(5):
            try:
                with self.engine.begin() as c:
                    c.execute(claims_table.insert().values(study_id=self.study_id, config_digest=digest,
                                                           trial_number=number))
                return None
            except IntegrityError:
                pass
            with self.engine.begin() as c:
                held_by = c.execute(sa.select(claims_table.c.trial_number).where(where)).scalar()
            if held_by is None:
                continue  # released between the insert and the read: try again
            if held_by == number:
                return None
            trial = self._trial(held_by)
            # A holder writes its key before it claims; one that has another key holds a claim left
            # by a deleted study whose id the database gave again: stale, like an abandoned one.
            if trial is not None and TrialAttrs.of(trial).config_key == key and not _abandoned(trial):
                return trial
            with self.engine.begin() as c:
                taken = c.execute(claims_table.update().where(where, claims_table.c.trial_number == held_by)
                                  .values(trial_number=number)).rowcount
            if taken == 1:
                return None
        return None


    def _trial(self, number: int) -> FrozenTrial | None:
        """Trial ``number`` of the study, or ``None``."""
        try:
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        except KeyError:
            return None
        return self.storage.get_trial(trial_id)


def trials_filled(study: optuna.Study, number: int, trials: int) -> bool:
    """Whether the trials numbered below ``number`` that count towards ``--trials``, or run as
    trials that will, already fill ``trials``. Each finished trial is read once (the study's copy
    of its trials tallies those that count as they finish): the cost is that of the trials in
    flight, not of the study."""
    kept = trials_of(study)
    everything = kept.trials()  # by number; a trial not read yet is left out
    with kept.lock:
        after = everything[bisect.bisect_left(everything, number, key=lambda t: t.number):]
        before = kept.counted - sum(1 for t in after if counts(t))
        before += sum(1 for t in kept.running(everything) if t.number < number and TrialAttrs.of(t).confirms is None)
    return before >= trials


def _abandoned(trial: FrozenTrial) -> bool:
    """Ended without a result that counts: failed for its driver's sake, or told a duplicate."""
    return trial.state.is_finished() and not counts(trial)
