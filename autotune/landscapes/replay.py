"""Replay: run a study against a recorded landscape instead of real trials.

Kernel Tuner's simulation runner, for this project: :class:`ReplayPool` is a
:class:`autotune.execution.pool.TrialPool`, so the real driver (:class:`autotune.study.study.Study`,
given a pool factory), its sampler and its duplicate handling run unchanged; only the trials are
answered from the recording. Each
configuration gets the :class:`~autotune.records.TrialResult` the recording measured (same
throughput, same confidence interval, same failure category).

Time is simulated. A trial costs its recorded wall time, except that its compile is charged at
the warm (cached) price when an earlier trial of this replay compiled the same graphs and the
target's compile cache is read back across processes on the recording machine (inductor's
``TORCHINDUCTOR_CACHE_DIR``, the Neuron compile cache; not XLA on CPU: :meth:`autotune.targets.base.Target.compile_cache_persists`). "The same
graphs" means the same configuration up to parameters that only the runtime sees
(:data:`autotune.space.RUNTIME_ONLY_PARAMS`). Conversely a configuration whose recording hit the cache (a
configuration recorded after its compile twin) is charged its twin's cold compile when it comes
first in a replay.

The benchmarks' :func:`bench.lib.simulate.simulate` runs the same study in Optuna's in-memory storage,
writing nothing, for comparing strategies over many seeds in seconds (``bench/search_bench.py``).
"""

from __future__ import annotations

import heapq
import math
import random
import tempfile
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError
from autotune.landscapes.landscape import ConfigRecord, Landscape, load_landscape
from autotune.measurement.noise import log_sigma
from autotune.measurement.windows import PRUNE_MIN_WINDOWS, t975
from autotune.execution.pool import Finished
from autotune.records import (
    CompileRequest,
    CompileStats,
    Failure,
    FailureCategory,
    Measurement,
    TrialPlan,
    TrialRequest,
    TrialResult,
)
from autotune.space import compile_key

if TYPE_CHECKING:
    from autotune.study.options import StudyResult


@dataclass(frozen=True)
class Charge:
    seconds: float
    compile_seconds: float
    compile_cached: bool


class CompileCacheModel:
    """What each trial of a replay costs, given the graphs compiled earlier in the same replay."""

    def __init__(self, landscape: Landscape) -> None:
        self.persists = landscape.compile_cache_persists
        self.compiled: set[str] = set()
        cold: dict[str, list[float]] = {}
        warm: dict[str, list[float]] = {}
        for r in landscape.records:
            if r.compile_seconds <= 0:
                continue
            (warm if r.compile_cached else cold).setdefault(compile_key(r.params), []).append(r.compile_seconds)
        self.cold = {k: max(v) for k, v in cold.items()}
        self.warm = {k: min(v) for k, v in warm.items()}
        # Where a graph was only ever recorded cold (or only warm), the other price comes from
        # the ratio measured on the graphs recorded both ways; with no such pair, a cached
        # compile costs nothing.
        self.warm_ratio = landscape.warm_compile_ratio

    def cold_compile(self, r: ConfigRecord) -> float:
        ck = compile_key(r.params)
        if ck in self.cold:
            return self.cold[ck]
        if r.compile_cached and self.warm_ratio > 0:
            return r.compile_seconds / self.warm_ratio
        return r.compile_seconds

    def warm_compile(self, r: ConfigRecord) -> float:
        ck = compile_key(r.params)
        if ck in self.warm:
            return self.warm[ck]
        return self.cold_compile(r) * self.warm_ratio

    def would_hit(self, params: dict[str, Any]) -> bool:
        return self.persists and compile_key(params) in self.compiled

    def charge(self, r: ConfigRecord) -> Charge:
        """The simulated cost of running ``r`` now; remembers its graphs as compiled."""
        cached = self.would_hit(r.params)
        compile_s = self.warm_compile(r) if cached else self.cold_compile(r)
        rest = max(0.0, r.wall_seconds - r.compile_seconds)  # start-up, warm-up steps, measurement
        if r.ok:
            self.compiled.add(compile_key(r.params))
        return Charge(rest + compile_s, compile_s, cached)


def replayed_result(r: ConfigRecord, plan: TrialPlan, charge: Charge) -> TrialResult:
    """The :class:`TrialResult` the recording measured, with the replay's simulated cost."""
    result = TrialResult(status="ok" if r.ok else "failed", plan=plan, wall_seconds=charge.seconds,
                         peak_host_memory_bytes=r.peak_host_memory_bytes)
    # The cache counters as this replay saw them: all hits, or all misses.
    lookups = (r.cache_hits or 0) + (r.cache_misses or 0)
    hits, misses = (lookups or r.graphs_compiled, 0) if charge.compile_cached else (0, lookups)
    known = r.cache_hits is not None or r.cache_misses is not None or charge.compile_cached
    result.compile = CompileStats(graphs_compiled=r.graphs_compiled, graphs_after_warmup=r.graphs_after_warmup,
                                  compile_seconds=charge.compile_seconds,
                                  cache_hits=hits if known else None, cache_misses=misses if known else None)
    if r.ok and r.throughput is not None:
        result.measurement = Measurement(
            throughput=r.throughput, ci95_low=r.ci95_low if r.ci95_low is not None else r.throughput,
            ci95_high=r.ci95_high if r.ci95_high is not None else r.throughput,
            step_time_median=r.step_time_median or 0.0, step_time_p90=r.step_time_median or 0.0,
            samples_per_step=r.samples_per_step or 0.0, steps_measured=r.steps_measured or 0,
            windows=r.windows or 0, converged=bool(r.converged), warmup_steps=r.warmup_steps or 0,
            warmup_seconds=r.warmup_seconds)
    else:
        category = FailureCategory.named(r.category) or FailureCategory.script_error
        result.failure = Failure(category=category, reason=f"(replayed) {r.reason or category.value}")
    return result


@dataclass
class ReplayedTrial:
    tag: Hashable
    key: str
    started: float
    finished: float
    charge: Charge
    record: ConfigRecord
    #: The throughput answered: the record's, or a draw around it in a noisy replay.
    figure: float | None = None


class ReplayPool:
    """A pool that answers trial requests from a landscape, on a simulated clock.

    ``workers`` trials run at once; :meth:`wait` returns the earliest to finish and moves the
    clock to its end. A configuration missing from the landscape is an error, not a failure:
    the replay would otherwise measure something that was never recorded.

    ``noise_seed``: each measurement is drawn again (log-normal around the recorded figure,
    seeded: a benchmark's seed replays the same draws), so that measuring a configuration twice
    gives two values, as on a machine. The draw of a configuration's k-th run depends on the seed,
    the configuration and k alone (common random numbers): two studies of one seed that differ in
    what they measure again (``--race``) read the same figures for the configurations both
    measure, so that a benchmark compares the studies, not their luck. The spread is the landscape's between-run one
    (:attr:`~autotune.landscapes.landscape.Landscape.run_sigma`: how far the next process reads)
    where its header records one, else the recorded 95% interval's (one process's windows, which
    says less: a neighbour's load moves whole runs). The run's interval moves with its figure.

    ``enough``: once it holds of the trials replayed so far, the pool takes no more (``free`` is
    0), which ends the study that drives it (a benchmark that has seen what it measures).
    """

    def __init__(self, landscape: Landscape | str | Path, workers: int = 1, noise_seed: int | None = None,
                 enough: Callable[[list[ReplayedTrial]], bool] | None = None) -> None:
        self.landscape = landscape if isinstance(landscape, Landscape) else load_landscape(landscape)
        self.workers = workers
        self.cache = CompileCacheModel(self.landscape)
        self.clock = 0.0
        self.trials: list[ReplayedTrial] = []
        self._running: list[tuple[float, int, Hashable, TrialResult]] = []
        self._seq = 0
        self._noise_seed = noise_seed
        self._runs: dict[str, int] = {}  # runs drawn so far, by configuration
        self._enough = enough

    @property
    def free(self) -> int:
        if self._enough is not None and self._enough(self.trials):
            return 0
        return self.workers - len(self._running)

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        if isinstance(request, CompileRequest):
            raise AutotuneError("replay pool: a recording holds measurements, not compile jobs")
        if self.free <= 0:
            raise AutotuneError("replay pool: no free worker")
        rec = self.landscape.get(request.plan.params)
        # The harness prunes on what this run reads, so the draw comes first.
        run = self._drawn(rec)
        charge, pruned = pruned_charge(run, self.cache.charge(rec), request.protocol.stop_below)
        result = replayed_result(run, request.plan, charge)
        if pruned and result.measurement is not None:
            result.measurement.pruned = True
        finish = self.clock + charge.seconds
        self.trials.append(ReplayedTrial(tag, rec.key, self.clock, finish, charge, rec, run.throughput if run.ok else None))
        self._seq += 1
        heapq.heappush(self._running, (finish, self._seq, tag, result))

    def _drawn(self, rec: ConfigRecord) -> ConfigRecord:
        """What one run of ``rec`` reads in this replay (the record itself when noiseless)."""
        if self._noise_seed is None or not rec.ok or rec.throughput is None:
            return rec
        k = self._runs[rec.key] = self._runs.get(rec.key, 0) + 1
        draw = random.Random(f"{self._noise_seed}:{rec.key}:{k}")
        sigma = self.landscape.run_sigma
        f = math.exp(draw.gauss(0.0, interval_sigma(rec) if sigma is None else sigma))
        return replace(rec, throughput=rec.throughput * f,
                       ci95_low=rec.ci95_low * f if rec.ci95_low is not None else None,
                       ci95_high=rec.ci95_high * f if rec.ci95_high is not None else None)

    def wait(self, timeout: float = 0.0) -> list[Finished]:
        if not self._running:
            return []
        finish, _, tag, result = heapq.heappop(self._running)
        self.clock = max(self.clock, finish)
        done = [Finished(tag, result=result)]
        while self._running and self._running[0][0] <= self.clock:
            _, _, tag, result = heapq.heappop(self._running)
            done.append(Finished(tag, result=result))
        return done

    def shutdown(self) -> None:
        self._running = []


# -- a study on a landscape -----------------------------------------------------------------------

def replay_study(landscape: Landscape | str | Path, *, trials: int | None = None, workdir: str | Path | None = None,
                 workers: int = 1, exhaustive: bool = False, noise_seed: int | None = None,
                 **options: Any) -> tuple[StudyResult, ReplayPool]:
    """Run :class:`autotune.study.study.Study` (the real driver) on ``landscape``; returns its result and the pool.

    The study's storage, outputs and cache go under ``workdir`` (a temporary folder by default),
    so nothing measured elsewhere is reused. ``trials`` defaults to the landscape's size;
    ``workers`` trials run at once on the simulated clock. ``exhaustive``: every configuration
    is enqueued in file order (as the space's known-good list), a grid through the real driver.
    ``noise_seed``: measurements are drawn with the landscape's noise (:class:`ReplayPool`).
    """
    from autotune.study.study import Study
    from autotune.study.options import StudyOptions

    land = landscape if isinstance(landscape, Landscape) else load_landscape(landscape)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="autotune-replay-"))
    pool = ReplayPool(land, workers=workers, noise_seed=noise_seed)
    opts = StudyOptions(script=script_path(land, work), args=list(land.header.get("args", [])),
                        target=land.target, space=_space_file(land, work, exhaustive),
                        trials=trials or land.size,
                        storage=f"sqlite:///{work / 'replay.db'}", out=work / "out", cache=work / "cache", **options)
    return Study(opts, pools=lambda study: pool).run(), pool


def script_path(land: Landscape, work: Path | None = None) -> str:
    """The script the landscape recorded, where it still is; else a stand-in of that name in
    ``work``, or this module without one (a study is of a script, and a replay runs none): a
    landscape replays wherever it was copied to."""
    recorded = land.header.get("script")
    script = Path(recorded) if recorded else Path(__file__)
    if script.is_absolute() and script.exists():
        return str(script)
    beside = Path(__file__).resolve().parents[2] / script  # a landscape of the repository's examples
    if beside.exists():
        return str(beside)
    if work is None:
        return __file__
    stand_in = work / script.name
    stand_in.write_text(f"# {script}, as recorded in a landscape: a replay runs no script\n")
    return str(stand_in)


def _space_file(land: Landscape, work: Path, exhaustive: bool = False) -> str:
    import yaml

    work.mkdir(parents=True, exist_ok=True)
    path = work / "space.yaml"
    text = land.header["space_yaml"]
    if exhaustive:
        doc = yaml.safe_load(text)
        doc["known_good"] = [r.params for r in sorted(land.records, key=lambda r: r.index)]
        text = yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text)
    return str(path)


# -- what noise and pruning make of a recorded measurement ---------------------------------------


def interval_sigma(r: ConfigRecord) -> float:
    """The standard deviation, on a log scale, of a recorded measurement (0 without an interval)."""
    return log_sigma(r.ci95_low, r.ci95_high) if r.ok else 0.0


def pruned_charge(r: ConfigRecord, charge: Charge, bar: float | None) -> tuple[Charge, bool]:
    """``charge`` less the measurement the harness's pruning saves against ``bar`` (None: no
    pruning), and whether it pruned."""
    saved = early_stop_seconds(r, bar) if bar else 0.0
    if not saved:
        return charge, False
    return Charge(charge.seconds - saved, charge.compile_seconds, charge.compile_cached), True


def early_stop_seconds(r: ConfigRecord, bar: float, min_windows: int = PRUNE_MIN_WINDOWS) -> float:
    """Measurement seconds the harness's sequential test (:func:`autotune.measurement.windows.cannot_win`)
    would have saved on ``r`` against ``bar``.

    The windows of the recording are taken as independent with the spread its 95% interval
    implies; the test stops after the first window count, at least ``min_windows``, whose
    t-interval's upper end is below ``bar``.
    """
    if not r.ok or r.throughput is None or r.ci95_low is None or r.ci95_high is None or not r.windows \
            or r.windows <= min_windows or r.throughput >= bar:
        return 0.0
    half = (r.ci95_high - r.ci95_low) / 2
    spread = half * math.sqrt(r.windows) / t975(r.windows - 1)  # one window's standard deviation
    for needed in range(min_windows, r.windows):
        if r.throughput + t975(needed - 1) * spread / math.sqrt(needed) < bar:
            return r.measure_seconds * (1 - needed / r.windows)
    return 0.0
