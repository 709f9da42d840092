"""Recorded landscapes: every configuration of a small space, measured once and kept as data.

This module is the file format and what reads it; recording one is
:mod:`autotune.landscapes.recording`'s job, replaying one :mod:`autotune.landscapes.replay`'s, and
answering configurations that were not recorded, from a model fitted on those that were,
:mod:`autotune.landscapes.surrogate`'s.

A landscape file is JSON lines. The first line is the header (``"kind": "header"``): the script,
its arguments, the target, the search space (its YAML text, so the file stands on its own), the
measurement protocol, the provenance and whether the target's compile cache is read back across
processes on the recording machine. Every other line is one configuration (``"kind": "config"``),
in the order the grid enumerates them (the file order of the space's parameters and choices):

    {"kind": "config", "index": 0, "key": "{...}", "params": {...}, "status": "ok",
     "category": null, "throughput": 1234.5, "ci95_low": ..., "ci95_high": ...,
     "compile_seconds": 4.1, "warmup_seconds": 5.0, "measure_seconds": 5.2, "wall_seconds": 17.3,
     "graphs_compiled": 3, "cache_hits": 0, "cache_misses": 3, ...}

A landscape of a space too large to enumerate is a seeded sample of it: the header says so
(``"sample": {"n": ..., "seed": ...}``) and each line's ``index`` is its position in the sample.
A configuration measured more than once (``--repeat``) has a line for each run.

The header's ``run_noise`` (``{"sigma": ..., "df": ..., "measured": ...}``), where there is one,
is how far one run of a configuration reads from the next on the recording's machine: the
standard deviation of a run's log figure over runs in separate processes, its degrees of
freedom, and what measured it (``bench/noise_calibration.py``). A replay draws each answer with
it (:class:`autotune.landscapes.replay.ReplayPool`).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.records import FailureCategory, TrialResult, TrialStatus
from autotune.space import SearchSpace, compile_key, config_key, parse_space

FORMAT_VERSION = 1


@dataclass
class ConfigRecord:
    """One recorded configuration."""

    index: int
    params: dict[str, Any]
    status: TrialStatus
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
    def figure(self) -> float:
        """The throughput of a configuration that ran (:attr:`ok`)."""
        if self.throughput is None:
            raise ValueError(f"configuration {self.key} has no figure: it did not run")
        return self.throughput

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
        if m is not None and rec.status == "ok":
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
        # best() ranks it; so do the records of what the space calls the same run (``unset_is``).
        self._space = self._parse_space() if "space_yaml" in self.header else None
        runs: dict[str, list[ConfigRecord]] = {}
        for r in self.records:
            runs.setdefault(self._key(r.params), []).append(r)
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
        """The recorded space; where the header has ``script_loader`` (what the baseline's run
        showed the script gives its DataLoaders itself), setting a knob to that value is the same
        run as leaving it unset (:meth:`~autotune.space.SearchSpace.same_as_script`)."""
        if self._space is None:
            raise AutotuneError(f"landscape {self.path} has no space in its header")
        return self._space

    def _key(self, params: dict[str, Any]) -> str:
        return config_key(params if self._space is None else canonical(self._space, params))

    def _parse_space(self) -> SearchSpace:
        space = parse_space(self.header["space_yaml"], self.header.get("space_source", self.path))
        return space.same_as_script(dict(self.header.get("script_loader") or {}))

    @property
    def compile_cache_persists(self) -> bool:
        return bool(self.header.get("compile_cache_persists", False))

    @property
    def run_sigma(self) -> float | None:
        """The between-run spread of the header's ``run_noise`` (``None``: none recorded)."""
        noise = self.header.get("run_noise")
        return float(noise["sigma"]) if noise else None

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
        key = self._key(params)
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


def canonical(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` in the canonical form of ``space``, or as they are where the space no longer
    allows them (a recording made under an older version of it)."""
    try:
        return space.validate(params)
    except InvalidConfigError:
        return params


def runs_by_configuration(landscape: Landscape) -> dict[str, list[ConfigRecord]]:
    """Every record of each configuration, by what the space calls the same run now (``unset_is``)."""
    space = landscape.space
    runs: dict[str, list[ConfigRecord]] = {}
    for r in landscape.records:
        runs.setdefault(config_key(canonical(space, r.params)), []).append(r)
    return runs


def _mean_record(ok: list[ConfigRecord]) -> ConfigRecord:
    """The first of a configuration's runs that ran, with the mean of their figures."""
    return replace(ok[0], throughput=statistics.fmean(r.figure for r in ok))


def by_configuration(landscape: Landscape) -> list[tuple[ConfigRecord, list[float]]]:
    """Each configuration that ran, once, fastest first by its mean: (its first record that ran with
    the mean as its throughput, the figure of each run that ran). A configuration measured again
    (``--repeat``) is ranked by all its runs, not by its luckiest."""
    out = []
    for rs in runs_by_configuration(landscape).values():
        ok = [r for r in rs if r.ok]
        if ok:
            out.append((_mean_record(ok), [r.figure for r in ok]))
    return sorted(out, key=lambda item: -item[0].figure)


def summary(landscape: Landscape) -> dict[str, Any]:
    """Counts, failures by category and the best configuration (by its mean, where it ran more
    than once), for a report."""
    ranked = by_configuration(landscape)
    failures: dict[str, int] = {}
    for r in landscape.records:
        if not r.ok:
            failures[r.category or "unknown"] = failures.get(r.category or "unknown", 0) + 1
    best, best_runs = ranked[0] if ranked else (None, [])
    near = [r for r, _ in ranked if best and r.figure >= 0.98 * best.figure]
    return {
        "configurations": len({r.key for r in landscape.records}), "measurements": len(landscape.records),
        "expected": (landscape.header.get("configurations") or 0) + landscape.header.get("refine", 0),
        "ok": len(ranked), "failures": failures,
        "best": {"params": best.params, "throughput": best.throughput, "runs": len(best_runs)} if best else None,
        "within_2pct": len(near),
        "worst_throughput": min((r.figure for r, _ in ranked), default=math.nan),
        "wall_seconds": round(sum(r.wall_seconds for r in landscape.records), 1),
    }
