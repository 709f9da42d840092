"""Studies side by side: which instance type gives the samples a user needs for the least money.

Each study's best configuration, measured on the instance type its provenance records, becomes one
row: the instance's throughput (the trial's, times the trials that fit side by side), the latency
where it was recorded, the price of an hour (with where it came from) and the cost of a million
samples; then each row's ratios to the first row's. ``autotune compare`` prints these rows.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.measurement.noise import Runs
from autotune.machine.pricing import Price, file_price, instance_rate, resolve_price
from autotune.storage.database import ShownURL
from autotune.storage.database import default_storage
from autotune.results.best import best_config, study_cost
from autotune.storage.optuna_storage import load_study
from autotune.storage.attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna

#: Latency percentiles a trial's measurement may hold (seconds), and the step times every
#: measurement holds (seconds), shown in ms.
LATENCIES = ("latency_p50", "latency_p90", "latency_p99")
STEP_TIMES = ("step_time_median", "step_time_p90")


class ComparisonRow(BaseModel):
    """One study's best configuration and what it costs."""

    study: str
    storage: ShownURL
    instance_type: str | None = None
    target: str
    trial: int | None = None
    #: The best configuration's parameters (``None``: the study has no successful trial).
    configuration: dict[str, Any] | None = None
    #: samples/s of one trial, and of the instance (trials side by side).
    trial_samples_per_second: float | None = None
    instance_samples_per_second: float | None = None
    trials_side_by_side: int = 1
    #: Milliseconds: ``latency_p50`` ... where the trial recorded latencies, and the step times.
    latency_ms: dict[str, float] = Field(default_factory=dict)
    step_time_ms: dict[str, float] = Field(default_factory=dict)
    #: US dollars per hour and where that price came from (``None``: no price known).
    usd_per_hour: float | None = None
    price_source: str | None = None
    usd_per_million_samples: float | None = None
    #: This row's instance throughput, and its cost per 1M samples, over the first row's.
    throughput_ratio: float | None = None
    cost_ratio: float | None = None


def split_study(spec: str, storage: str | None) -> tuple[str, str]:
    """``STORAGE_URL#STUDY`` -> (``STUDY``, ``STORAGE_URL``); a plain name is in ``storage`` (default:
    sqlite under .autotune/)."""
    url, sep, name = spec.rpartition("#")
    return (name, url) if sep else (spec, storage or default_storage())


def compare(specs: list[str], *, storage: str | None = None, prices: Path | None = None) -> list[ComparisonRow]:
    """One row per study (``NAME`` in ``storage``, or ``STORAGE_URL#NAME``), ratios to the first.

    A study's price is the prices file's for its instance type, else the one its last run used,
    else the catalogue's.
    """
    rows = [_row(*split_study(spec, storage), prices) for spec in specs]
    first = rows[0]
    for row in rows:
        if row.instance_samples_per_second and first.instance_samples_per_second:
            row.throughput_ratio = row.instance_samples_per_second / first.instance_samples_per_second
        if row.usd_per_million_samples and first.usd_per_million_samples:
            row.cost_ratio = row.usd_per_million_samples / first.usd_per_million_samples
    return rows


def _row(name: str, storage: str, prices: Path | None) -> ComparisonRow:
    study = load_study(name, storage)
    stored = StudyAttrs.of(study)
    instance = (stored.provenance or {}).get("instance_type")
    row = ComparisonRow(study=name, storage=storage, instance_type=instance, target=stored.target or "")
    best = best_config(study, name)
    if best is None:
        return row
    row.trial, row.configuration, row.trial_samples_per_second = best.trial, best.params, best.throughput
    measured = _measurements(study, {r.trial: r.seconds for r in best.runs})
    row.latency_ms = {k: v * 1e3 for k in LATENCIES if (v := _mean(measured, k)) is not None}
    row.step_time_ms = {k: v * 1e3 for k in STEP_TIMES if (v := _mean(measured, k)) is not None}
    price = _price(stored, instance, prices)
    cost = study_cost(stored, best.throughput, price)
    if cost is not None:
        row.instance_samples_per_second = cost.instance_samples_per_second
        row.trials_side_by_side = cost.trials_side_by_side
        row.usd_per_hour, row.price_source = cost.per_hour, cost.source
        row.usd_per_million_samples = cost.usd_per_million_samples
    elif best.throughput:
        row.instance_samples_per_second, row.trials_side_by_side = instance_rate(
            best.throughput, instance_type=instance, devices_per_trial=stored.devices_per_trial,
            nodes=stored.nodes_per_trial or 1)
    return row


def _price(stored: StudyAttrs, instance: str | None, prices: Path | None) -> Price | None:
    listed = file_price(instance, prices) if prices is not None else None
    if listed is not None:
        return listed
    if stored.price is not None:
        return Price.model_validate(stored.price)
    return resolve_price(instance)


def _measurements(study: optuna.Study, runs: dict[int, float | None]) -> list[tuple[dict[str, Any], float | None]]:
    """The measurement of each of ``runs`` (trial numbers, with their seconds) as stored (JSON, with
    any figure a newer autotune added)."""
    out = []
    for t in study.get_trials(deepcopy=False):
        result = TrialAttrs.of(t).result
        if t.number in runs and result is not None:
            out.append((json.loads(result).get("measurement") or {}, runs[t.number]))
    return out


def _mean(measured: list[tuple[dict[str, Any], float | None]], name: str) -> float | None:
    """``name``'s mean over the runs that recorded it, weighed as the configuration's figure is."""
    kept = [(m[name], s) for m, s in measured if isinstance(m.get(name), (int, float))]
    return Runs(tuple(v for v, _ in kept), seconds=tuple(s for _, s in kept)).mean if kept else None


CSV_FIELDS = ["study", "instance_type", "target", "trial", "instance_samples_per_second", "trial_samples_per_second",
              "trials_side_by_side", *(f"{k}_ms" for k in LATENCIES), *(f"{k}_ms" for k in STEP_TIMES),
              "usd_per_hour", "price_source", "usd_per_million_samples", "throughput_ratio", "cost_ratio",
              "configuration", "storage"]


def comparison_csv(rows: list[ComparisonRow]) -> str:
    """The rows as CSV: one column per figure (its unit in its name), the configuration as JSON."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for row in rows:
        line = row.model_dump(exclude={"latency_ms", "step_time_ms", "configuration"})
        line.update({f"{k}_ms": v for k, v in {**row.latency_ms, **row.step_time_ms}.items()})
        line["configuration"] = json.dumps(row.configuration, sort_keys=True) if row.configuration is not None else ""
        writer.writerow(line)
    return buf.getvalue()
