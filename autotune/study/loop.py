"""The study's ask-tell loop, the only one: ask Optuna for a trial, dispatch it (:mod:`.dispatch`),
wait on the pool, tell each outcome (:mod:`.record`), until the study holds its trials, its time or
budget runs out, or its sampler only proposes configurations measured already.

The pool may be Ray workers, a compile stage in front of them, a replay of a recorded landscape or
a test's: the loop is the same (:class:`autotune.execution.pool.TrialPool`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from autotune.execution.pool import Finished, TrialPool
from autotune.search.configurations import enumerate_space, grid_size
from autotune.space import SearchSpace, config_key
from autotune.repeats import pruning
from autotune.study.budget import Budget
from autotune.study.dispatch import Dispatch, Outcome
from autotune.study.options import StudyOptions
from autotune.repeats.racing import RACE, Racing, Repeat
from autotune.results.ranking import trial_key
from autotune.results.standings import maximizes, noise_of, standings, trial_counts
from autotune.storage.optuna_storage import HEARTBEAT_S, Heartbeats
from autotune.storage.attrs import TrialAttrs, counts
from autotune.storage.trial_cache import fail_stale, trials_of

if TYPE_CHECKING:
    import optuna

#: Proposals in a row answered without a run (measured before, invalid) after which the sampler
#: is taken to have nothing new to propose.
MAX_DUPLICATES = 50


class AskTell:
    """The loop of one study on one pool. ``beats``: heartbeats for the trials in flight (``None``
    for a study no other driver can see); ``on_progress(running)`` after each round."""

    def __init__(self, study: optuna.Study, dispatch: Dispatch, budget: Budget, options: StudyOptions, *,
                 beats: Heartbeats | None, on_progress: Callable[[int], None], racing: Racing | None = None) -> None:
        self.study = study
        #: What the study measures again between its trials (:mod:`.racing`); ``None``: nothing.
        self.racing = racing
        #: Race re-measurements told so far (read from the study once, then counted as told).
        self._raced: int | None = None
        self.dispatch = dispatch
        self.told = dispatch.told
        self.budget = budget
        self.options = options
        self.beats = beats
        #: The storage's id of each trial it beats for, by number.
        self._beating: dict[int, int] = {}
        self.on_progress = on_progress
        self.deadline = time.monotonic() + options.timeout if options.timeout else math.inf
        #: Every configuration of the space has been measured (the study ended before ``--trials``).
        self.exhausted = False
        #: Why the study asks for no more trials although it has fewer than ``--trials``: a trial
        #: showed that the script cannot run here as it is (its data is missing, the disk is full),
        #: whatever the configuration.
        self.stopped: str | None = None
        #: The configurations of the space, while it stays small and all-categorical.
        self._grid: tuple[SearchSpace, set[str]] | None = None

    def stop(self, why: str) -> None:
        """Ask for no more trials: every configuration would fail the same way (``why``: the data
        is missing, the disk is full). Said once, whatever stops the study first."""
        if self.stopped:
            return
        self.stopped = why
        self.told.notes.append(f"{why}. Every configuration would fail the same way, so the study asks for no more "
                               "trials; once that is put right, the same command continues it")

    def timed_out(self) -> bool:
        return time.monotonic() >= self.deadline

    def counts(self, exclude: set[int]) -> tuple[int, int]:
        return trial_counts(self.study, exclude)

    def measure(self, pool: TrialPool) -> None:
        """Ask, run and tell trials until the study holds ``--trials`` of them (or time runs out),
        and the configurations the racing asks for again."""
        if self.beats is None:
            self._measure(pool)
        else:
            with self.beats:
                self._measure(pool)
        skipped = self.racing.unconfirmed(standings(self.study)) if self.racing is not None else []
        if skipped:
            self.told.notes.append(f"the study's time or budget ran out before trials "
                                   f"{', '.join(str(t.number) for t in skipped)} were measured again")

    def _measure(self, pool: TrialPool) -> None:
        in_flight: dict[Hashable, optuna.Trial] = {}
        #: Re-measurements running: tag -> the repeat.
        again: dict[Hashable, Repeat] = {}
        consecutive_dups = 0
        last_check = 0.0

        def tell(job: Finished) -> None:
            tag = job.tag
            if tag in again:
                repeat = again.pop(tag)
                self.told.tell_confirmation(repeat.trial, job.result, job.error, why=repeat.why)
                if repeat.why == RACE and self._raced is not None:
                    self._raced += 1
                return
            trial = in_flight.pop(tag)
            self._release(trial)
            self.told.tell_held(trial, job.result, job.error)

        while True:
            want_more, running_elsewhere = self._wants_more(in_flight)
            exhausted = consecutive_dups >= MAX_DUPLICATES
            while pool.free > 0 and not self.timed_out() \
                    and self.budget.allows(self.study, len(in_flight) + len(again)):
                if self.stopped is None and self._measure_again(
                        pool, again, finishing=(not want_more or exhausted) and not in_flight):
                    continue
                if not want_more or exhausted:
                    break
                if self._every_configuration_taken():  # only where a trial could start: it reads every trial
                    exhausted = True
                    break
                trial = self.study.ask()
                # At once: a driver killed before the trial is submitted must still leave a trial
                # that goes stale (one with no heartbeat at all never does, and a resume would wait).
                self._hold(trial)
                if self.dispatch(trial) is Outcome.submitted:
                    in_flight[trial.number] = trial
                    consecutive_dups = 0
                else:
                    self._release(trial)
                    consecutive_dups += 1
                want_more, running_elsewhere = self._wants_more(in_flight)
                exhausted = consecutive_dups >= MAX_DUPLICATES
            if exhausted and not in_flight and not again:
                self.exhausted = True
                self.told.notes.append("every configuration the sampler proposes was measured already: "
                                       "the space is exhausted")
                return
            if not in_flight and not again:
                if running_elsewhere and not self.timed_out():
                    fail_stale(self.study)  # another driver's trials, or a killed one's
                    time.sleep(1.0)
                    continue
                return
            self.on_progress(len(in_flight) + len(again))
            for job in pool.wait(timeout=1.0):
                tell(job)
            if time.monotonic() - last_check > HEARTBEAT_S:
                fail_stale(self.study)
                last_check = time.monotonic()

    def _measure_again(self, pool: TrialPool, again: dict[Hashable, Repeat], *, finishing: bool) -> bool:
        """Hand ``pool`` the re-measurement :class:`Racing` asks for now, if any."""
        if self.racing is None:
            return False
        measured = standings(self.study)
        if self._raced is None:  # the study's earlier runs' races, read once: this driver counts its own
            self._raced = sum(TrialAttrs.of(t).again == RACE for t in self.study.get_trials(deepcopy=False))
        spent = self._raced + sum(r.why == RACE for r in again.values())
        busy = {trial_key(r.trial) for r in again.values()}
        repeat = self.racing.next(measured, spent, busy, maximize=maximizes(self.study), finishing=finishing,
                                  decisive=pruning.decisive_seconds(noise_of(self.study, measured)),
                                  ran=self.told.ran > 0)
        if repeat is None:
            return False
        runs = next(s.runs.n for s in measured if s.trial.number == repeat.trial.number)
        tag = ("again", repeat.trial.number, runs)
        self.dispatch.again(repeat.trial, f"{repeat.trial.number:04d}-again{runs}", tag)
        again[tag] = repeat
        return True

    def _wants_more(self, in_flight: dict[Hashable, optuna.Trial]) -> tuple[bool, int]:
        """Whether the study wants another trial, and how many other drivers run."""
        counted, running_elsewhere = self.counts(exclude={n for n in in_flight if isinstance(n, int)})
        return counted + len(in_flight) + running_elsewhere < self.options.trials and self.stopped is None, \
            running_elsewhere

    def _hold(self, trial: optuna.Trial) -> None:
        if self.beats is not None:
            self._beating[trial.number] = trials_of(self.study).trial_id(trial.number)
            self.beats.hold(self._beating[trial.number])

    def _release(self, trial: optuna.Trial) -> None:
        if self.beats is not None:
            self.beats.release(self._beating.pop(trial.number))

    def _every_configuration_taken(self) -> bool:
        """Whether each configuration of a small all-categorical space has a trial already, measured
        or running (the sampler would only propose duplicates; a larger space is left to the
        sampler, which stops the study after MAX_DUPLICATES in a row)."""
        import optuna

        from autotune.search.strategy import MAX_ENUMERATED

        space = self.dispatch.requests.space
        free = space.free_parameters
        if any(p.choices is None for p in free) or grid_size(space) > MAX_ENUMERATED:
            return False
        if self._grid is None or self._grid[0] is not space:
            self._grid = (space, {config_key(c) for c in enumerate_space(space)})
        taken = {TrialAttrs.of(t).config_key for t in self.study.get_trials(deepcopy=False)
                 if t.state == optuna.trial.TrialState.RUNNING or counts(t)}
        return self._grid[1] <= taken



