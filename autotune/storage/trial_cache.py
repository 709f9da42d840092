"""The driver's copy of a study's trials, and what is kept of them: one per study, read from the
database only where it changed, so that a read costs about the same however many trials the study
holds.

The loop, the claims, the budget check, the sampler and the reports each read the study's trials,
about fifteen times per trial. A finished trial never changes (Optuna refuses any write to it), so
:class:`StudyTrials` keeps a study's trials by number and a read asks the database only for the
trials not finished yet (one query, by state), for those it held unfinished that finished since,
and for any numbered after the newest it holds. Each trial is taken in once, when it is first
seen finished: the trials that count towards ``--trials`` are tallied then, and what readers keep
beside the study (its sums, :mod:`.folded`; the sampler's points) is folded from the same trials.

:class:`TrialCache` is the Optuna storage a driver opens on a database (Optuna's ``BaseStorage``
over its ``RDBStorage``): every study object opened on it through :func:`opened` shares the
study's one copy. All of it goes through Optuna's public API.
"""

from __future__ import annotations

import bisect
import copy
import threading
import time
import weakref
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from optuna.storages import BaseStorage

from autotune.storage.attrs import counts

if TYPE_CHECKING:
    import optuna
    import sqlalchemy as sa
    from optuna.distributions import BaseDistribution
    from optuna.study import StudyDirection
    from optuna.trial import FrozenTrial, TrialState

    from autotune.storage.reconnecting import ReconnectingStorage

T = TypeVar("T")

#: New trials found one by one (by number) in one read, beyond which the rest are read in one go.
_CATCH_UP = 64

#: Seconds for which a read of a study's trials answers again while this process wrote nothing to
#: the database: the loop reads the study many times a trial, and another driver's trials are
#: seen within this long.
FRESH_S = 1.0


class StudyTrials:
    """One study's trials as this process last read them, by number, and what is kept of them.
    ``storage`` and ``study_id``: where they are stored (``None`` for a study opened elsewhere,
    read through ``read``)."""

    def __init__(self, storage: BaseStorage | None, study_id: int | None, *,
                 backend: ReconnectingStorage | None = None,
                 read: Callable[[], list[FrozenTrial]] | None = None) -> None:
        self.storage, self.study_id = storage, study_id
        self._backend, self._read = backend, read
        self.lock = threading.RLock()
        #: Trial ``n`` at index ``n``; ``None`` where one was not read yet (``_holes`` of them).
        #: ``_open``: the numbers of those held unfinished or not read, which each read asks for again.
        self._by_number: list[FrozenTrial | None] = []
        self._holes = 0
        self._open: set[int] = set()
        self._read_once = False
        #: Every trial numbered below ``low`` is finished and taken in; above it, ``_seen`` are.
        self.low = 0
        self._seen: set[int] = set()
        #: The finished trials, in the order they were taken in (each once), and how many of them
        #: count towards ``--trials`` (:func:`autotune.storage.attrs.counts`).
        self.finished: list[FrozenTrial] = []
        self.counted = 0
        self._kept: dict[str, Any] = {}
        #: The last read: its trials, when it was made, and the process's writes at that moment.
        self._last: tuple[list[FrozenTrial], float, int] | None = None

    def trials(self) -> list[FrozenTrial]:
        """The study's trials in number order, read where they changed, each newly finished one taken in."""
        with self.lock:
            if self._backend is not None:
                writes = self.storage.writes if isinstance(self.storage, TrialCache) else 0
                last, now = self._last, time.monotonic()
                if last is not None and last[2] == writes and now - last[1] < FRESH_S:
                    return list(last[0])
                trials = self._fetch(self._backend)
                self._last = (list(trials), now, writes)  # its own copy: a reader may change the one it gets
            else:
                assert self._read is not None
                trials = self._read()
            self.take_in(trials)
            return trials

    def take_in(self, trials: list[FrozenTrial]) -> None:
        """Take in the finished trials of ``trials`` (the study's, in number order) not taken in yet."""
        with self.lock:
            start = bisect.bisect_left(trials, self.low, key=lambda t: t.number)
            for t in trials[start:]:
                if t.number not in self._seen and t.state.is_finished():
                    self._seen.add(t.number)
                    self.finished.append(t)
                    self.counted += counts(t)
            while self.low in self._seen:
                self._seen.discard(self.low)
                self.low += 1

    def running(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        """The running trials of ``trials`` (the study's, as just read): all numbered from ``low`` on."""
        from optuna.trial import TrialState

        start = bisect.bisect_left(trials, self.low, key=lambda t: t.number)
        return [t for t in trials[start:] if t.state == TrialState.RUNNING]

    def kept(self, name: str, make: Callable[[], T]) -> T:
        """What a reader keeps beside the study's trials under ``name`` (made by ``make`` the first time)."""
        with self.lock:
            if name not in self._kept:
                self._kept[name] = make()
            return self._kept[name]

    def trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (what a heartbeat or a trial object names it by)."""
        if self.storage is None or self.study_id is None:
            raise LookupError("a study opened without autotune: where its trials are stored is not known")
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    # -- reading the database --------------------------------------------------------------------------
    def _fetch(self, backend: ReconnectingStorage) -> list[FrozenTrial]:
        from optuna.trial import TrialState

        assert self.study_id is not None
        if not self._read_once:  # the first read: every trial, once
            self._put(backend.get_all_trials(self.study_id, deepcopy=False))
            self._read_once = True
        else:
            unfinished = backend.get_all_trials(self.study_id, deepcopy=False,
                                                states=(TrialState.WAITING, TrialState.RUNNING))
            self._put(unfinished)
            still = {t.number for t in unfinished}
            for number in sorted(self._open - still):  # finished since the last read, or never read
                self._put([self._trial(backend, number)])
            found = 0
            while (new := self._trial(backend, len(self._by_number))) is not None:  # newer than all held
                self._put([new])
                found += 1
                if found == _CATCH_UP:  # many: the rest in one read
                    self._put([t for t in backend.get_all_trials(self.study_id, deepcopy=False)
                               if t.number >= len(self._by_number) or t.number in self._open])
                    break
        if self._holes:
            return [t for t in self._by_number if t is not None]
        return list(self._by_number)  # type: ignore[arg-type]  # no hole: no None in it

    def _trial(self, backend: ReconnectingStorage, number: int) -> FrozenTrial | None:
        assert self.study_id is not None
        try:
            return backend.get_trial(backend.get_trial_id_from_study_id_trial_number(self.study_id, number))
        except KeyError:
            return None

    def _put(self, trials: Sequence[FrozenTrial | None]) -> None:
        for t in trials:
            if t is None:
                continue
            if t.number >= len(self._by_number):
                self._open.update(range(len(self._by_number), t.number))
                self._holes += t.number - len(self._by_number)
                self._by_number.extend([None] * (t.number + 1 - len(self._by_number)))
            elif self._by_number[t.number] is None:
                self._holes -= 1
            self._by_number[t.number] = t
            if t.state.is_finished():
                self._open.discard(t.number)
            else:
                self._open.add(t.number)


_opened: weakref.WeakKeyDictionary[optuna.Study, StudyTrials] = weakref.WeakKeyDictionary()
_opened_lock = threading.Lock()


def opened(study: optuna.Study, storage: BaseStorage) -> optuna.Study:
    """``study``, opened on ``storage``: on a :class:`TrialCache`, its trials are the copy that
    every study object of that name on it shares."""
    if isinstance(storage, TrialCache):
        record = storage.study(storage.get_study_id_from_name(study.study_name))
        with _opened_lock:
            _opened[study] = record
    return study


def trials_of(study: optuna.Study) -> StudyTrials:
    """The copy of ``study``'s trials that this process keeps: the shared one where it was
    :func:`opened`, else one of its own (read through the study)."""
    with _opened_lock:
        record = _opened.get(study)
        if record is None:
            ref = weakref.ref(study)

            def read() -> list[FrozenTrial]:
                alive = ref()
                assert alive is not None  # the copy lives only as long as its study
                return alive.get_trials(deepcopy=False)

            record = _opened[study] = StudyTrials(None, None, read=read)
        return record


def fail_stale(study: optuna.Study) -> None:
    """Fail ``study``'s trials whose heartbeats stopped (another driver's, or a killed one's) and
    queue their configurations again: Optuna's ``fail_stale_trials``, on the database itself."""
    import optuna

    record = trials_of(study)
    if isinstance(record.storage, TrialCache):
        assert record.study_id is not None
        record.storage.fail_stale(study.study_name, record.study_id)
    else:
        optuna.storages.fail_stale_trials(study)


class TrialCache(BaseStorage):
    """The database of ``backend``, each study's trials kept in this process (:class:`StudyTrials`);
    every other call is the backend's."""

    def __init__(self, backend: ReconnectingStorage) -> None:
        self.backend = backend
        #: When the database did not answer (its calls wait for it).
        self.outages = backend.outages
        self._lock = threading.Lock()
        self._studies: dict[int, StudyTrials] = {}
        self._names: dict[int, str] = {}
        self._directions: dict[int, list[StudyDirection]] = {}
        #: Per study id, the study on the backend itself that Optuna's stale-trial check reads.
        self._heartbeat_studies: dict[int, optuna.Study] = {}
        #: The writes of trials this process made, by any study: a read after one reads again.
        self.writes = 0

    @property
    def engine(self) -> sa.Engine:
        """The database's engine, for autotune's own tables beside Optuna's (the claims)."""
        return self.backend.engine

    def study(self, study_id: int) -> StudyTrials:
        """The trials of study ``study_id``, as this process keeps them."""
        with self._lock:
            record = self._studies.get(study_id)
            if record is None:
                record = self._studies[study_id] = StudyTrials(self, study_id, backend=self.backend)
            return record

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        trials = self.study(study_id).trials()
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def record_heartbeat(self, trial_id: int) -> None:
        self.backend.record_heartbeat(trial_id)

    def fail_stale(self, name: str, study_id: int) -> None:
        """:func:`fail_stale` for study ``name`` (``study_id``): none while the database is out or
        was within a grace period (no heartbeat could reach it meanwhile)."""
        import optuna

        interval = self.backend.heartbeat_interval
        if interval is None:
            return
        if self.outages.recently_down(within_s=self.backend.grace_period or 2 * interval):
            return
        with self._lock:
            study = self._heartbeat_studies.get(study_id)
        if study is None:
            study = optuna.load_study(study_name=name, storage=self.backend)
            with self._lock:
                self._heartbeat_studies[study_id] = study
        self.outages.call(optuna.storages.fail_stale_trials, study)
        self.writes += 1

    # -- the rest: the backend's, directions and names kept (they never change) -------------------------
    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        return self.backend.create_new_study(directions, study_name)

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self._studies.pop(study_id, None)
            self._names.pop(study_id, None)
            self._directions.pop(study_id, None)
            self._heartbeat_studies.pop(study_id, None)
        self.backend.delete_study(study_id)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self.backend.set_study_user_attr(study_id, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self.backend.set_study_system_attr(study_id, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self.backend.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        if study_id not in self._names:
            self._names[study_id] = self.backend.get_study_name_from_id(study_id)
        return self._names[study_id]

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        if study_id not in self._directions:
            self._directions[study_id] = self.backend.get_study_directions(study_id)
        return self._directions[study_id]

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self.backend.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self.backend.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[Any]:
        return self.backend.get_all_studies()

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        done = self.backend.create_new_trial(study_id, template_trial)
        self.writes += 1
        return done

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        self.backend.set_trial_param(trial_id, param_name, param_value_internal, distribution)
        self.writes += 1

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self.backend.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def get_trial_param(self, trial_id: int, param_name: str) -> float:
        return self.backend.get_trial_param(trial_id, param_name)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        done = self.backend.set_trial_state_values(trial_id, state, values)
        self.writes += 1
        return done

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        self.backend.set_trial_intermediate_value(trial_id, step, intermediate_value)
        self.writes += 1

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.backend.set_trial_user_attr(trial_id, key, value)
        self.writes += 1

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.backend.set_trial_system_attr(trial_id, key, value)
        self.writes += 1

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return self.backend.get_trial_user_attrs(trial_id)

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        return self.backend.get_trial_system_attrs(trial_id)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self.backend.get_trial(trial_id)

    def remove_session(self) -> None:
        self.backend.remove_session()
