"""The compile farm on a recorded landscape: what compiling apart from the devices buys, on a
simulated clock.

On AWS Neuron a compile takes about ten minutes on the host's CPUs while the NeuronCores wait,
and a measurement about one. Today a device slot compiles a configuration, then measures it
(:func:`compile_then_measure`). With a compile farm, K cheap CPU workers compile ahead of the
measurements and the D device slots only load a published artifact and measure it
(:func:`compile_farm`): the study's own compile stage
(:class:`autotune.execution.compile_stage.CompileAhead`) in front of simulated compile workers and
device slots, so that a change of the study's policy is a change of what the farm gives.
``bench/compile_farm.py`` prints what the two give.

The configurations come from a recorded landscape, with their times scaled to Neuron-like
figures (:func:`neuron_jobs`): each configuration keeps its recorded compile and rest (wall time
less the compile: start-up, warm-up, measurement), scaled so that the landscape's means are the
figures given, so that a configuration that compiled twice as long as another still does.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from autotune.execution.pool import Finished
from autotune.landscapes.landscape import ConfigRecord, Landscape
from autotune.landscapes.replay import CompileCacheModel
from autotune.records import (
    CompileOutcome,
    CompileRequest,
    CompileStage,
    Failure,
    FailureCategory,
    TrialPlan,
    TrialRequest,
    TrialResult,
)
from autotune.space import compile_key

#: Neuron-like figures: "a compile that can take over ten minutes"; a measurement of about one.
NEURON_COMPILE_S = 600.0
NEURON_REST_S = 60.0
#: Loading a compiled artifact on the device, as a fraction of its cold compile, where the
#: landscape recorded no warm compile to measure it by. An assumption, printed as one.
ASSUMED_LOAD_FRACTION = 0.05


@dataclass(frozen=True)
class FarmJob:
    """One configuration of a study, in simulated seconds."""

    key: str
    compile_key: str
    #: It compiles and is measured. False: it fails before any measurement (a landscape keeps no
    #: measurement of a failed configuration), so its compile publishes nothing.
    ok: bool
    compile_s: float  # a cold compile; for a failed configuration, the time until it failed
    load_s: float  # loading its published artifact (today's design: its compile from the cache)
    rest_s: float  # start-up, warm-up and measurement; 0 for a failed configuration


@dataclass(frozen=True)
class NeuronScale:
    """How a landscape's recorded seconds became Neuron-like ones."""

    compile_factor: float
    rest_factor: float
    load_fraction: float  # a load as a fraction of the cold compile
    #: "recorded" (the landscape's warm compiles), "assumed" (it has none: ASSUMED_LOAD_FRACTION)
    #: or "given" (the caller's)
    load_source: str


def neuron_jobs(landscape: Landscape, compile_s: float = NEURON_COMPILE_S, rest_s: float = NEURON_REST_S,
                load_fraction: float | None = None) -> tuple[list[FarmJob], NeuronScale]:
    """Every configuration of ``landscape`` as a :class:`FarmJob`, in file order, and the scale used.

    Compiles are scaled so that the mean cold compile of the measured configurations that compile
    at all is ``compile_s`` (an eager configuration compiles nothing and stays at 0), rests so that
    their mean is ``rest_s``. Cold and warm prices are :class:`CompileCacheModel`'s (a graph recorded
    only from the cache is charged its twin's cold compile). A failed configuration's time until
    it failed is its recorded compile when it has one, else its whole recorded wall time (it died
    before measuring anything; the landscape does not say which part was compiling), scaled as a
    compile. A load is the recorded warm price where the landscape has one (its warm/cold ratio
    otherwise), or ``ASSUMED_LOAD_FRACTION`` of the cold compile where it has none; ``load_fraction``
    overrides both.
    """
    cache = CompileCacheModel(landscape)
    measured = [r for r in landscape.records if r.ok]
    colds = [cache.cold_compile(r) for r in measured if cache.cold_compile(r) > 0]
    rests = [_rest(r) for r in measured]
    compile_factor = compile_s / statistics.mean(colds) if colds else 0.0
    rest_factor = rest_s / statistics.mean(rests) if rests else 0.0
    source = "given" if load_fraction is not None else "recorded" if cache.warm_ratio > 0 else "assumed"
    fraction = {"given": load_fraction, "recorded": cache.warm_ratio, "assumed": ASSUMED_LOAD_FRACTION}[source]
    jobs = []
    for r in landscape.records:
        if r.ok:
            cold = cache.cold_compile(r)
            load = cache.warm_compile(r) if source == "recorded" else cold * fraction
            jobs.append(FarmJob(r.key, compile_key(r.params), True, cold * compile_factor,
                                load * compile_factor, _rest(r) * rest_factor))
        else:
            until_failed = r.compile_seconds if r.compile_seconds > 0 else r.wall_seconds
            jobs.append(FarmJob(r.key, compile_key(r.params), False, until_failed * compile_factor, 0.0, 0.0))
    return jobs, NeuronScale(compile_factor, rest_factor, fraction, source)


def _rest(r: ConfigRecord) -> float:
    return max(0.0, r.wall_seconds - r.compile_seconds)


def study_order(jobs: list[FarmJob], trials: int, seed: int) -> list[FarmJob]:
    """The configurations a study of ``trials`` trials runs (all of them if fewer), in an order drawn by ``seed``."""
    return random.Random(seed).sample(jobs, min(trials, len(jobs)))


@dataclass(frozen=True)
class StudyTimeline:
    """What a simulated study took, and what its device slots did meanwhile."""

    wall_s: float
    slots: int
    busy_s: float  # slot-seconds doing anything: compiling (today's design) or a measure job
    measuring_s: float  # slot-seconds running a compiled configuration: load, start-up, warm-up, measurement
    compile_s: float  # seconds of compiling, on the slots (today) or on the workers (farm); failed ones included
    compiles: int  # cold compiles run

    @property
    def busy(self) -> float:
        return self.busy_s / (self.slots * self.wall_s) if self.wall_s else 0.0

    @property
    def measuring(self) -> float:
        return self.measuring_s / (self.slots * self.wall_s) if self.wall_s else 0.0


def compile_then_measure(jobs: list[FarmJob], slots: int, cache_persists: bool) -> StudyTimeline:
    """Today's design: each of ``slots`` device slots takes the next configuration, compiles it, then measures it.

    The compile is charged at the warm price (``load_s``) when the compile cache persists and an
    earlier configuration with the same compile key was given to a slot and compiles: the rule
    the replay charges by (:meth:`CompileCacheModel.charge`). A configuration that fails holds its
    slot for the time until it failed.
    """
    free_at = [0.0] * slots  # a heap: when each slot is next free
    compiled: set[str] = set()
    busy = measuring = 0.0
    compiles = 0
    for job in jobs:
        start = heapq.heappop(free_at)
        cached = cache_persists and job.compile_key in compiled
        compile_s = job.load_s if cached else job.compile_s
        compiles += not cached and compile_s > 0
        if job.ok:
            compiled.add(job.compile_key)
        busy += compile_s + job.rest_s
        measuring += job.rest_s
        heapq.heappush(free_at, start + compile_s + job.rest_s)
    return StudyTimeline(max(free_at), slots, busy, measuring, busy - measuring, compiles)


class _Clock:
    """Simulated seconds, and the jobs of both pools in the order they end."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, t: float, then: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, then))

    def advance(self) -> bool:
        """To the next instant anything ends, ending everything that ends then; False when nothing is left."""
        if not self._events:
            return False
        self.now = self._events[0][0]
        while self._events and self._events[0][0] == self.now:
            heapq.heappop(self._events)[2]()
        return True


class _Compilers:
    """``workers`` compile workers on the simulated clock, as a compile job runs on one: it holds
    its worker from the start, finds its graphs published (done at once), waits on the lock of a job
    compiling the same graphs (then finds them published, or compiles itself if that job failed),
    or takes the lock and compiles (:mod:`autotune.published`)."""

    def __init__(self, clock: _Clock, workers: int, jobs: dict[Hashable, FarmJob]) -> None:
        self.clock, self.workers, self.jobs = clock, workers, jobs
        self.running = 0
        self.published: set[str] = set()
        self.locked: dict[str, deque[Hashable]] = {}  # graphs being compiled -> tags waiting on the lock
        self.finished: list[Finished] = []
        self.compiles = 0
        self.compiling_s = 0.0

    @property
    def free(self) -> int:
        return self.workers - self.running

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        assert isinstance(request, CompileRequest)
        self.running += 1
        job = self.jobs[tag]
        if job.compile_s == 0 and job.ok or job.compile_key in self.published:
            self._done(tag, published=True)
        elif job.compile_key in self.locked:
            self.locked[job.compile_key].append(tag)
        else:
            self.locked[job.compile_key] = deque()
            self._compile(tag)

    def _compile(self, tag: Hashable) -> None:
        job = self.jobs[tag]
        self.compiles += 1
        self.compiling_s += job.compile_s
        self.clock.at(self.clock.now + job.compile_s, lambda: self._compiled(tag))

    def _compiled(self, tag: Hashable) -> None:
        job = self.jobs[tag]
        waiting = self.locked.pop(job.compile_key)
        self._done(tag, published=False)
        if job.ok:
            self.published.add(job.compile_key)
            for other in waiting:
                self._done(other, published=True)
        elif waiting:  # the next job on the lock takes it and compiles itself
            self.locked[job.compile_key] = waiting
            self._compile(waiting.popleft())

    def _done(self, tag: Hashable, *, published: bool) -> None:
        self.running -= 1
        job = self.jobs[tag]
        stage = CompileStage(seconds=0.0 if published else job.compile_s, published_before=published)
        result = None if published or job.ok else _result(job, ok=False)
        self.finished.append(Finished(tag, compiled=CompileOutcome(stage=stage, result=result)))

    def wait(self, timeout: float) -> list[Finished]:
        out, self.finished = self.finished, []
        return out

    def shutdown(self) -> None:
        pass


class _Slots:
    """``slots`` device slots on the simulated clock: a measure job loads its published artifact,
    then starts, warms up and measures."""

    def __init__(self, clock: _Clock, slots: int, jobs: dict[Hashable, FarmJob]) -> None:
        self.clock, self.slots, self.jobs = clock, slots, jobs
        self.running = 0
        self.finished: list[Finished] = []
        self.busy_s = 0.0

    @property
    def free(self) -> int:
        return self.slots - self.running

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        job = self.jobs[tag]
        self.running += 1
        self.busy_s += job.load_s + job.rest_s
        self.clock.at(self.clock.now + job.load_s + job.rest_s, lambda: self._measured(tag))

    def _measured(self, tag: Hashable) -> None:
        self.running -= 1
        self.finished.append(Finished(tag, result=_result(self.jobs[tag], ok=True)))

    def wait(self, timeout: float) -> list[Finished]:
        out, self.finished = self.finished, []
        return out

    def shutdown(self) -> None:
        pass


_PLAN = TrialPlan(target="neuron", params={})


def _request(tag: int) -> TrialRequest:
    return TrialRequest(plan=_PLAN, script="train.py", trial_dir=f"trial-{tag}", timeout_s=math.inf)


def _result(job: FarmJob, *, ok: bool) -> TrialResult:
    if ok:
        return TrialResult(status="ok", plan=_PLAN)
    return TrialResult(status="failed", plan=_PLAN,
                       failure=Failure(category=FailureCategory.compile_error, reason=f"{job.key} failed to compile"))


def compile_farm(jobs: list[FarmJob], slots: int, workers: int, ahead: int | None = None) -> StudyTimeline:
    """The compile farm: ``workers`` CPU workers compile ahead; ``slots`` device slots only measure.

    The policy is the study's own (:class:`autotune.execution.compile_stage.CompileAhead`), driven as
    the study's loop drives it, on a simulated clock:

    * The study hands over the next configuration, in its order, while the compile stage has room:
      a compile worker is free and fewer than ``ahead`` (default ``workers + slots``, as
      ``--compile-ahead`` is by default) are compiling or compiled and waiting.
    * Its compile job holds a worker from then on (:class:`_Compilers`): done at once where its
      graphs are published or it compiles nothing (an eager configuration), waiting on the lock of
      a job compiling the same graphs, or compiling them. A compile that fails never takes a device
      slot; the next job waiting on its lock compiles itself (its own recording decides whether it
      fails too).
    * A free device slot takes the configuration compiled first and runs its measure job: loading
      the artifact (``load_s``), then start-up, warm-up and measurement (``rest_s``).

    Artifacts are shared whether or not the landscape's target reads its cache back across
    processes: a farm is built on published artifacts.
    """
    from autotune.execution.compile_stage import CompileAhead

    if workers < 1:
        raise ValueError("a compile farm needs at least one compile worker; 0 is compile_then_measure")
    limit = workers + slots if ahead is None else ahead
    if limit < 1:
        raise ValueError("a compile farm must keep at least one configuration ahead")
    by_tag: dict[Hashable, FarmJob] = dict(enumerate(jobs))
    clock = _Clock()
    compilers, trial_slots = _Compilers(clock, workers, by_tag), _Slots(clock, slots, by_tag)

    def split(request: TrialRequest) -> tuple[CompileRequest, TrialRequest]:
        tag = int(request.trial_dir.removeprefix("trial-"))
        return CompileRequest(trial=request, artifact_key=by_tag[tag].compile_key, cache_root=""), request

    stage = CompileAhead(trial_slots, compilers, limit, split)
    pending = deque(range(len(jobs)))
    while True:
        # As the study's loop at each instant: hand over while there is room, take in what ended,
        # until nothing moves (a published or eager configuration is compiled at once, and a
        # measurement that starts makes room ahead).
        while True:
            handed = 0
            while pending and stage.free:
                tag = pending.popleft()
                stage.submit(_request(tag), tag)
                handed += 1
            if not (handed or compilers.finished or trial_slots.finished or stage.ready and trial_slots.free):
                break
            stage.wait(0.0)
        if not clock.advance():
            break
    return StudyTimeline(clock.now, slots, trial_slots.busy_s, trial_slots.busy_s, compilers.compiling_s,
                         compilers.compiles)


def simulate_study(jobs: list[FarmJob], slots: int, workers: int, *, ahead: int | None = None,
                   cache_persists: bool = True) -> StudyTimeline:
    """Today's design with 0 compile workers, the compile farm with more."""
    if workers == 0:
        return compile_then_measure(jobs, slots, cache_persists)
    return compile_farm(jobs, slots, workers, ahead)
