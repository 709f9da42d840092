"""The compile farm on a recorded landscape: what compiling apart from the devices buys, on a
simulated clock.

On AWS Neuron a compile takes about ten minutes on the host's CPUs while the NeuronCores wait,
and a measurement about one. Today a device slot compiles a configuration, then measures it
(:func:`compile_then_measure`). With a compile farm, K cheap CPU workers compile ahead of the
measurements and the D device slots only load a published artifact and measure it
(:func:`compile_farm`). Both are the policies the study driver follows, written out event by
event so that each reads as the rule it is; ``bench/compile_farm.py`` prints what they give.

The configurations come from a recorded landscape, with their times scaled to Neuron-like
figures (:func:`neuron_jobs`): each configuration keeps its recorded compile and rest (wall time
less the compile: start-up, warm-up, measurement), scaled so that the landscape's means are the
figures given, so that a configuration that compiled twice as long as another still does.
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections import deque
from dataclasses import dataclass

from autotune.landscapes.landscape import ConfigRecord, Landscape
from autotune.landscapes.replay import CompileCacheModel
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


def compile_farm(jobs: list[FarmJob], slots: int, workers: int, ahead: int | None = None) -> StudyTimeline:
    """The compile farm: ``workers`` CPU workers compile ahead; ``slots`` device slots only measure.

    * The driver keeps up to ``ahead`` configurations (default ``workers + slots``) ahead of the
      slots: compiling, waiting on a compile, or compiled and waiting for a slot. It admits the
      next configuration, in the study's order, while fewer are ahead and the configuration can
      be placed: its compile key's artifact is published, or its key is compiling (it waits on
      that compile: a lock, then the published artifact; it takes no worker), or it compiles
      nothing (an eager configuration), or a worker is free to compile it.
    * A finished compile publishes its artifact; it and the configurations that waited on it join
      the ready queue (FIFO). A configuration whose compile fails leaves the driver and never takes
      a device slot; those that waited on it are placed again before anything new is admitted
      (each then compiles itself: its own recording decides whether it fails too).
    * A free device slot takes the head of the ready queue and runs its measure job: loading the
      artifact (``load_s``), then start-up, warm-up and measurement (``rest_s``).

    Artifacts are shared whether or not the landscape's target reads its cache back across
    processes: a farm is built on published artifacts.
    """
    if workers < 1:
        raise ValueError("a compile farm needs at least one compile worker; 0 is compile_then_measure")
    limit = workers + slots if ahead is None else ahead
    if limit < 1:
        raise ValueError("a compile farm must keep at least one configuration ahead")
    pending = deque(jobs)  # not yet admitted, in the study's order
    again: deque[FarmJob] = deque()  # waited on a compile that has finished: placed before anything new
    ready: deque[FarmJob] = deque()
    published: set[str] = set()
    waiting: dict[str, list[FarmJob]] = {}  # compile key being compiled -> configurations waiting on it
    events: list[tuple[float, int, str, FarmJob]] = []
    clock = busy = compiling = 0.0
    free_workers, free_slots, n_ahead, seq, compiles = workers, slots, 0, 0, 0

    def at(t: float, kind: str, job: FarmJob) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, job))

    def place(job: FarmJob) -> bool:
        nonlocal free_workers, compiles, compiling
        if job.ok and (job.compile_key in published or job.compile_s == 0):
            ready.append(job)
        elif job.compile_key in waiting:
            waiting[job.compile_key].append(job)
        elif free_workers:
            free_workers -= 1
            compiles += 1
            compiling += job.compile_s
            waiting[job.compile_key] = []
            at(clock + job.compile_s, "compiled", job)
        else:
            return False
        return True

    def dispatch() -> None:
        nonlocal n_ahead, free_slots, busy
        # A slot taking a configuration makes room ahead, and an admitted configuration can be
        # ready at once: go round until nothing moves.
        moved = True
        while moved:
            moved = False
            while again and place(again[0]):
                again.popleft()
            while not again and pending and n_ahead < limit and place(pending[0]):
                pending.popleft()
                n_ahead += 1
                moved = True
            while ready and free_slots:
                job = ready.popleft()
                free_slots -= 1
                n_ahead -= 1
                busy += job.load_s + job.rest_s
                at(clock + job.load_s + job.rest_s, "measured", job)
                moved = True

    dispatch()
    while events:
        clock = events[0][0]
        while events and events[0][0] == clock:
            _, _, kind, job = heapq.heappop(events)
            if kind == "measured":
                free_slots += 1
                continue
            free_workers += 1
            waiters = waiting.pop(job.compile_key)
            if job.ok:
                published.add(job.compile_key)
                ready.append(job)
            else:
                n_ahead -= 1
            again.extend(waiters)
        dispatch()
    return StudyTimeline(clock, slots, busy, busy, compiling, compiles)


def simulate_study(jobs: list[FarmJob], slots: int, workers: int, *, ahead: int | None = None,
                   cache_persists: bool = True) -> StudyTimeline:
    """Today's design with 0 compile workers, the compile farm with more."""
    if workers == 0:
        return compile_then_measure(jobs, slots, cache_persists)
    return compile_farm(jobs, slots, workers, ahead)
