"""Recorded landscapes: every configuration of a small space, measured once and kept as data.

A landscape file is JSON lines. The first line is the header (``"kind": "header"``): the script,
its arguments, the target, the search space (its YAML text, so the file stands on its own), the
measurement protocol, the provenance and whether the target's compile cache is read back across
processes on the recording machine. Every other line is one configuration (``"kind": "config"``),
in the order the grid enumerates them (the file order of the space's parameters and choices):

    {"kind": "config", "index": 0, "key": "{...}", "params": {...}, "status": "ok",
     "category": null, "throughput": 1234.5, "ci95_low": ..., "ci95_high": ...,
     "compile_seconds": 4.1, "warmup_seconds": 5.0, "measure_seconds": 5.2, "wall_seconds": 17.3,
     "graphs_compiled": 3, "cache_hits": 0, "cache_misses": 3, ...}

A space too large to enumerate (the built-in ones) is recorded as a seeded sample of it
(``RecordOptions.sample``, :func:`autotune.search.configurations.sample_space`): the baseline and
the known-good configurations first, then a space-filling sequence; the header says so
(``"sample": {"n": ..., "seed": ...}``) and each line's ``index`` is its position in the sample.

Recording is resumable: configurations already in the file are skipped, so a killed recording
continues where it stopped (and a sample recorded again with the same seed and a larger ``n``
continues with the configurations that follow). Replaying a landscape is
:mod:`autotune.landscapes.replay`'s job; answering configurations that were not recorded, from a
model fitted on those that were, is :mod:`autotune.landscapes.surrogate`'s.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError, InvalidConfigError
from autotune.records import FailureCategory, MeasurementProtocol, TrialResult
from autotune.search.configurations import enumerate_space, grid_size, sample_space
from autotune.space import SearchSpace, compile_key, config_key, load_space, parse_space

FORMAT_VERSION = 1

#: Thread settings decide figures on a shared machine; each target adds the variables it reads.
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


# -- the file -------------------------------------------------------------------------------------

@dataclass
class ConfigRecord:
    """One recorded configuration."""

    index: int
    params: dict[str, Any]
    status: str
    category: str | None = None
    reason: str | None = None
    throughput: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    step_time_median: float | None = None
    samples_per_step: float | None = None
    steps_measured: int | None = None
    windows: int | None = None
    converged: bool | None = None
    warmup_steps: int | None = None
    compile_seconds: float = 0.0
    warmup_seconds: float = 0.0
    measure_seconds: float = 0.0
    wall_seconds: float = 0.0
    graphs_compiled: int = 0
    graphs_after_warmup: int = 0
    cache_hits: int | None = None
    cache_misses: int | None = None
    peak_host_memory_bytes: int | None = None

    @property
    def key(self) -> str:
        return config_key(self.params)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.throughput is not None

    @property
    def outcome(self) -> str:
        """``ok``, or the category of its failure (a failure recorded without one: the script's)."""
        return "ok" if self.ok else (self.category or FailureCategory.script_error.value)

    @property
    def compile_cached(self) -> bool:
        """The recording loaded this configuration's graphs from the compile cache."""
        return bool(self.cache_hits) and not self.cache_misses

    def to_json(self) -> dict[str, Any]:
        doc = {"kind": "config", "key": self.key}
        doc.update({f: getattr(self, f) for f in self.__dataclass_fields__})
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ConfigRecord:
        return cls(**{f: doc[f] for f in cls.__dataclass_fields__ if f in doc})

    @classmethod
    def from_result(cls, index: int, params: dict[str, Any], result: TrialResult) -> ConfigRecord:
        m, c = result.measurement, result.compile
        rec = cls(index=index, params=params, status="ok" if result.ok and m is not None else "failed",
                  wall_seconds=round(result.wall_seconds, 3), graphs_compiled=c.graphs_compiled,
                  graphs_after_warmup=c.graphs_after_warmup,
                  compile_seconds=round(c.compile_seconds or 0.0, 3), cache_hits=c.cache_hits,
                  cache_misses=c.cache_misses, peak_host_memory_bytes=result.peak_host_memory_bytes)
        if m is not None:
            rec.warmup_seconds = round(m.warmup_seconds, 3)
            rec.steps_measured, rec.samples_per_step = m.steps_measured, m.samples_per_step
            rec.windows, rec.converged, rec.warmup_steps = m.windows, m.converged, m.warmup_steps
            rec.measure_seconds = round(m.steps_measured * m.samples_per_step / m.throughput, 3) \
                if m.throughput > 0 else 0.0
        if rec.status == "ok":
            rec.throughput, rec.ci95_low, rec.ci95_high = m.throughput, m.ci95_low, m.ci95_high
            rec.step_time_median = m.step_time_median
        else:
            failure = result.failure
            rec.category = (failure.category if failure else FailureCategory.script_error).value
            rec.reason = failure.reason if failure else "the trial measured nothing"
        return rec


@dataclass
class Landscape:
    """A recorded landscape: its header and its configurations, in file (grid) order."""

    header: dict[str, Any]
    records: list[ConfigRecord] = field(default_factory=list)
    path: str = "<memory>"

    def __post_init__(self) -> None:
        # A configuration measured more than once (--repeat) answers with the mean of its runs, as
        # best() ranks it.
        runs: dict[str, list[ConfigRecord]] = {}
        for r in self.records:
            runs.setdefault(r.key, []).append(r)
        self.by_key = {}
        for key, rs in runs.items():
            ok = [r for r in rs if r.ok]
            self.by_key[key] = _mean_record(ok) if len(ok) > 1 else (ok or rs)[-1]

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @property
    def target(self) -> str:
        return self.header["target"]

    @property
    def space(self) -> SearchSpace:
        return parse_space(self.header["space_yaml"], self.header.get("space_source", self.path))

    @property
    def compile_cache_persists(self) -> bool:
        return bool(self.header.get("compile_cache_persists", False))

    @property
    def size(self) -> int:
        """How many configurations a study on it can measure."""
        return len(self.records)

    @property
    def warm_compile_ratio(self) -> float:
        """A compile that loads its graphs from the cache over the same graphs' cold compile: the
        median over the graphs recorded both ways (a ``num_workers`` twin recorded after its
        compile twin); 0 where none was (a cached compile then costs nothing)."""
        cold: dict[str, float] = {}
        warm: dict[str, float] = {}
        for r in self.records:
            if r.compile_seconds > 0:
                ck = compile_key(r.params)
                if r.compile_cached:
                    warm[ck] = min(warm.get(ck, math.inf), r.compile_seconds)
                else:
                    cold[ck] = max(cold.get(ck, 0.0), r.compile_seconds)
        pairs = [warm[k] / cold[k] for k in warm if cold.get(k, 0) > 0]
        return min(1.0, statistics.median(pairs)) if pairs else 0.0

    def best(self) -> ConfigRecord:
        """The configuration with the highest mean figure (a record carrying the mean, where it was
        measured more than once): a repeat's lucky first run is not the best."""
        ranked = by_configuration(self)
        if not ranked:
            raise AutotuneError(f"landscape {self.path} has no successful configuration")
        return ranked[0][0]

    def get(self, params: dict[str, Any]) -> ConfigRecord:
        key = config_key(params)
        try:
            return self.by_key[key]
        except KeyError:
            raise AutotuneError(f"configuration {key} is not in the landscape {self.path}; "
                                "record it or restrict the space to the recorded one") from None


def load_landscape(path: str | Path) -> Landscape:
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise AutotuneError(f"cannot read landscape {path}: {exc.strerror}") from None
    header: dict[str, Any] | None = None
    records: list[ConfigRecord] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            # A recording killed mid-write leaves at most a torn last line.
            if n == len(lines):
                break
            raise AutotuneError(f"{path}: line {n}: not JSON ({exc.msg})") from None
        if doc.get("kind") == "header":
            header = doc
        elif doc.get("kind") == "config":
            records.append(ConfigRecord.from_json(doc))
    if header is None:
        raise AutotuneError(f"{path}: no header line; is this a landscape recorded by autotune landscape record?")
    return Landscape(header, records, str(path))


# -- recording ------------------------------------------------------------------------------------

@dataclass
class RecordOptions:
    script: str | Path
    target: str
    space: str | Path
    out: str | Path
    args: list[str] = field(default_factory=list)
    trial_timeout: float = 300.0
    protocol: MeasurementProtocol = field(default_factory=lambda: MeasurementProtocol(
        max_measure_seconds=5.0, min_windows=4))
    #: Cache root of the recording's compiled artifacts and trial logs (default:
    #: ``.autotune/landscapes/<name>/``, kept out of the repository).
    cache: str | Path | None = None
    trials_dir: str | Path | None = None
    limit: int | None = None  # record at most this many new configurations (a smoke test)
    #: Record this many configurations of a seeded sample of the space instead of every one.
    sample: int | None = None
    seed: int = 0
    #: After the sample, record this many more: each the configuration not recorded yet that a
    #: surrogate fitted on everything recorded so far predicts best (:func:`_refinement`).
    refine: int | None = None
    #: Then measure again until this many configurations with the highest mean figure have
    #: each been measured at least twice (:func:`_repeat`).
    repeat: int | None = None

    def check(self) -> None:
        if self.refine is not None and (self.sample is None or self.refine < 0):
            raise AutotuneError("--refine continues a sample (--sample N): give both, --refine at least 0")
        if self.repeat is not None and self.repeat < 1:
            raise AutotuneError("--repeat must be at least 1")


#: A space with more configurations than this is recorded as a sample (``--sample``), not a grid.
MAX_GRID = 5000


def recorded_configurations(space: SearchSpace, o: RecordOptions) -> list[dict[str, Any]]:
    """What a recording runs, in order: every configuration of the space, or its sample."""
    if o.sample is not None:
        if o.sample < 1:
            raise AutotuneError("--sample must be at least 1")
        return sample_space(space, o.sample, o.seed)
    if grid_size(space) > MAX_GRID:
        raise AutotuneError(f"{o.space} has up to {grid_size(space):,} configurations, too many to record "
                            "every one; record a sample of it with --sample 150")
    return enumerate_space(space)


def record(o: RecordOptions, on_config: Callable[[ConfigRecord, int], None] | None = None) -> Landscape:
    """Run every configuration of ``o.space`` (or of its sample, ``o.sample``) not yet in ``o.out``,
    one after the other, in order."""
    from autotune.provenance import provenance
    from autotune.targets import resolve_target
    from autotune.trial import check_script, plan_for
    from autotune.workers.launcher import TrialLimits, run_trial

    script = check_script(o.script)
    space = load_space(o.space)
    target = resolve_target(o.target, script)
    if space.target != target.name:
        raise AutotuneError(f"search space {o.space} is for target {space.target!r}, not {target.name!r}")
    o.check()
    configs = recorded_configurations(space, o)
    out = Path(o.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cache_root = Path(o.cache) if o.cache else Path(".autotune") / "landscapes" / out.stem
    trials_dir = Path(o.trials_dir) if o.trials_dir else cache_root / "trials"
    done: set[str] = set()
    if out.exists() and out.stat().st_size:
        existing = load_landscape(out)
        _check_same_recording(existing.header, o, target.name)
        # What the space calls the same run now (``unset_is``) was recorded once already.
        done = {config_key(canonical(space, r.params)) for r in existing.records}
        _drop_torn_line(out)
        header = dict(existing.header)
        if o.sample is not None and (existing.header.get("configurations") != len(configs)
                                     or (o.refine or 0) > existing.header.get("refine", 0)):  # extended
            header.update({"configurations": len(configs), "sample": {"n": o.sample, "seed": o.seed},
                           **({"refine": o.refine} if o.refine else {})})
        if (o.repeat or 0) > existing.header.get("repeat", 0):
            header["repeat"] = o.repeat
        if header != existing.header:
            _rewrite_header(out, header)
    else:
        header = {
            "kind": "header", "format": FORMAT_VERSION, "target": target.name,
            "script": os.path.relpath(script, Path.cwd()) if script.is_relative_to(Path.cwd()) else str(script),
            "args": list(o.args), "space_source": str(o.space), "space_yaml": Path(o.space).read_text(),
            "protocol": o.protocol.model_dump(mode="json"), "trial_timeout_s": o.trial_timeout,
            "compile_cache_persists": target.compile_cache_persists(),
            # What of the recording's environment decides its figures (threads on a shared machine).
            "env": {k: os.environ[k] for k in _recorded_env() if k in os.environ},
            "configurations": len(configs), "started_at": time.time(),
            **({"sample": {"n": o.sample, "seed": o.seed}} if o.sample is not None else {}),
            **({"refine": o.refine} if o.refine else {}),
            **({"repeat": o.repeat} if o.repeat else {}),
            "provenance": provenance(target, script, o.args),
        }
        with open(out, "w") as fh:
            fh.write(json.dumps(header, sort_keys=True) + "\n")
    recorded = 0

    def run(index: int, params: dict[str, Any], run_name: str | None = None) -> None:
        nonlocal recorded
        plan = plan_for(target, space, params, cache_root=str(cache_root.resolve()))
        result = run_trial(plan, script, o.args, trial_dir=trials_dir / (run_name or f"{index:04d}"),
                           limits=TrialLimits(timeout_s=o.trial_timeout), protocol=o.protocol)
        rec = ConfigRecord.from_result(index, params, result)
        with open(out, "a") as fh:  # one line per configuration, written whole: a kill loses one trial
            fh.write(json.dumps(rec.to_json(), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        recorded += 1
        if on_config:
            on_config(rec, len(configs) + (o.refine or 0))

    for index, params in enumerate(configs):
        if config_key(params) in done:
            continue
        if o.limit is not None and recorded >= o.limit:
            return load_landscape(out)
        run(index, params)
    while o.refine and (o.limit is None or recorded < o.limit):
        landscape = load_landscape(out)
        refined = len({r.key for r in landscape.records if r.index >= len(configs)})  # a repeat is no new one
        if refined >= o.refine:
            break
        params = _refinement(landscape)
        if params is None:
            break
        run(len(configs) + refined, params)
    while o.repeat and (o.limit is None or recorded < o.limit):
        landscape = load_landscape(out)
        again = _repeat(landscape, o.repeat)
        if again is None:
            break
        run(again.index, canonical(space, again.params), run_name=f"{again.index:04d}-2")  # its second run
    return load_landscape(out)


def _repeat(landscape: Landscape, top: int) -> ConfigRecord | None:
    """The configuration to measure again: of the ``top`` configurations with the highest mean
    figure, the first measured only once; None when each of them has two measurements or more.

    One measurement of a short run does not bound the next: the best of a recording is the
    configuration whose single draw came out highest as much as the fastest one. Measuring again
    what ranks first, until the first ``top`` by their means have each been measured twice, lets a
    lucky draw fall back and the next come up, and shows the noise between runs beside the
    interval within each (:mod:`autotune.landscapes.surrogate` fits both). A continued recording
    picks up where it stopped; a failure of a configuration that ran before counts as a
    measurement, never as its figure."""
    runs = _runs_by_configuration(landscape)
    for mean, _ in by_configuration(landscape)[:top]:
        rs = runs[config_key(canonical(landscape.space, mean.params))]
        if len(rs) < 2:
            return rs[0]
    return None


def _refinement(landscape: Landscape) -> dict[str, Any] | None:
    """The configuration not recorded yet that a surrogate of ``landscape`` predicts best, or None
    when it predicts nothing new to run.

    A sample of a large space holds few configurations near its best, where a surrogate fitted on
    it is least sure and a search spends its last trials: boosting adds up the small effects of
    many knobs into an optimum that nothing measured supports. Recording what the surrogate
    believes best, refitting and going on, is how its optimum comes to rest on measurements."""
    from autotune.landscapes.surrogate import SurrogateLandscape

    space = landscape.space
    done = {config_key(canonical(space, r.params)) for r in landscape.records}
    for rec in SurrogateLandscape(landscape).ranked():
        params = canonical(space, rec.params)
        if config_key(params) not in done:
            return params
    return None


def canonical(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` in the canonical form of ``space``, or as they are where the space no longer
    allows them (a recording made under an older version of it)."""
    try:
        return space.validate(params)
    except InvalidConfigError:
        return params


def _recorded_env() -> list[str]:
    from autotune.targets import all_targets

    return [*_THREAD_ENV, *(var for target in all_targets() for var in target.environment)]


def _check_same_recording(header: dict[str, Any], o: RecordOptions, target: str) -> None:
    import yaml

    same_space = yaml.safe_load(header.get("space_yaml") or "") == yaml.safe_load(Path(o.space).read_text())
    if header.get("target") != target or header.get("args") != list(o.args) or not same_space:
        raise AutotuneError(f"{o.out} holds a recording of another target, space or script arguments; "
                            "choose another --out to record this one")
    sample = header.get("sample")
    if (sample is None) != (o.sample is None) or (sample is not None and sample.get("seed") != o.seed):
        was = f"a sample of seed {sample.get('seed')} (--sample N --seed {sample.get('seed')})" if sample \
            else "every configuration (no --sample)"
        raise AutotuneError(f"{o.out} holds {was}; continue it as it was begun, or choose another --out")


def _rewrite_header(path: Path, header: dict[str, Any]) -> None:
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() and json.loads(line).get("kind") == "header":
            lines[i] = json.dumps(header, sort_keys=True) + "\n"
            break
    write_atomic(path, "".join(lines))


def _drop_torn_line(path: Path) -> None:
    """Cut a last line that a killed recording left half-written."""
    text = path.read_text()
    if text and not text.endswith("\n"):
        path.write_text(text[: text.rfind("\n") + 1])


def _runs_by_configuration(landscape: Landscape) -> dict[str, list[ConfigRecord]]:
    """Every record of each configuration, by what the space calls the same run now (``unset_is``)."""
    space = landscape.space
    runs: dict[str, list[ConfigRecord]] = {}
    for r in landscape.records:
        runs.setdefault(config_key(canonical(space, r.params)), []).append(r)
    return runs


def _mean_record(ok: list[ConfigRecord]) -> ConfigRecord:
    """The first of a configuration's runs that ran, with the mean of their figures."""
    return replace(ok[0], throughput=statistics.fmean(r.throughput for r in ok))


def by_configuration(landscape: Landscape) -> list[tuple[ConfigRecord, list[float]]]:
    """Each configuration that ran, once, fastest first by its mean: (its first record that ran with
    the mean as its throughput, the figure of each run that ran). A configuration measured again
    (``--repeat``) is ranked by all its runs, not by its luckiest."""
    out = []
    for rs in _runs_by_configuration(landscape).values():
        ok = [r for r in rs if r.ok]
        if ok:
            out.append((_mean_record(ok), [r.throughput for r in ok]))
    return sorted(out, key=lambda item: -item[0].throughput)


def summary(landscape: Landscape) -> dict[str, Any]:
    """Counts, failures by category and the best configuration (by its mean, where it ran more
    than once), for a report."""
    ranked = by_configuration(landscape)
    failures: dict[str, int] = {}
    for r in landscape.records:
        if not r.ok:
            failures[r.category or "unknown"] = failures.get(r.category or "unknown", 0) + 1
    best, best_runs = ranked[0] if ranked else (None, [])
    near = [r for r, _ in ranked if best and r.throughput >= 0.98 * best.throughput]
    return {
        "configurations": len({r.key for r in landscape.records}), "measurements": len(landscape.records),
        "expected": (landscape.header.get("configurations") or 0) + landscape.header.get("refine", 0),
        "ok": len(ranked), "failures": failures,
        "best": {"params": best.params, "throughput": best.throughput, "runs": len(best_runs)} if best else None,
        "within_2pct": len(near),
        "worst_throughput": min((r.throughput for r, _ in ranked), default=math.nan),
        "wall_seconds": round(sum(r.wall_seconds for r in landscape.records), 1),
    }
