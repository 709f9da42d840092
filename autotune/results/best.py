"""The best configuration of a stored study, in the form a training job uses directly
(:class:`~autotune.results.outputs.BestConfig`, best.json): its figures (the mean over its runs,
:mod:`.standings`), its plan, what it costs and what it achieves of the devices' peak."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.machine.pricing import Cost, Price, Utilisation, utilisation
from autotune.measurement.noise import RUN_SECONDS, RunNoise, seen_text
from autotune.objectives import speedup
from autotune.records import ApplySpec, TrialResult
from autotune.results.outputs import BestConfig, FrontPoint, Noise
from autotune.results.ranking import Standing
from autotune.results.standings import _baseline, _best, _preferred, baseline_trial, maximizes, noise_of, \
    objective_names, pareto_front, standings
from autotune.storage.attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna


def study_cost(stored: StudyAttrs, throughput: float | None, price: Price | None = None) -> Cost | None:
    """What a million samples cost at ``throughput`` (one trial's samples/s) on the study's instance,
    at ``price`` or else the price of the study's last run; ``None`` without either."""
    if price is None and stored.price is not None:
        price = Price.model_validate(stored.price)
    if price is None or not throughput:
        return None
    return Cost.of(throughput, price, instance_type=(stored.provenance or {}).get("instance_type"),
                   devices_per_trial=stored.devices_per_trial, nodes=stored.nodes_per_trial or 1)


def best_config(study: optuna.Study, name: str, prov: dict[str, Any] | None = None) -> BestConfig | None:
    measured = standings(study)
    noise = noise_of(study)
    best = _best(study)
    if best is None:
        return None
    t, head = best
    attrs, stored, names = TrialAttrs.of(t), StudyAttrs.of(study), objective_names(study)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    base = _baseline(study)
    base_value = base.value.mean if base is not None else None
    value = head.value.mean
    ratio = speedup(value, base_value, maximizes(study))
    plan = result.plan if result else None
    thr = head.throughput
    # The configuration's own env vars: its placement on the tuning machine (NeuronCores) stays out.
    env = dict(plan.env) if plan else {}
    script = Path(stored.script or (prov or stored.provenance or {}).get("script") or "script.py").name
    return BestConfig(
        study=name, trial=t.number, target=stored.target or "",
        params=dict(plan.params) if plan else dict(t.params),
        env=env,
        apply=ApplySpec.of(plan, study=name, trial=t.number, script=script, env=env, speedup=ratio) if plan else None,
        space=stored.space, baseline_params=_params(base_trial) if (base_trial := baseline_trial(study)) else None,
        flags_env=plan.flags_env if plan else None,
        compiler_flags=plan.compiler_flags if plan else None,
        knobs={k: v for k, v in (plan.knobs.model_dump() if plan else {}).items() if v not in (None, False)},
        launch=plan.launch if plan else None, nproc_per_node=plan.nproc_per_node if plan else 1,
        nnodes=plan.nnodes if plan else 1,
        script_args=plan.script_args(list(stored.args or [])) if plan and plan.script_flags else None,
        metric=names[_preferred(study)], value=value,
        value_ci95_low=head.value.low, value_ci95_high=head.value.high,
        throughput=thr.mean if thr else None, ci95_low=thr.low if thr else None, ci95_high=thr.high if thr else None,
        runs=list(head.runs), noise=noise_figure(measured, noise),
        objectives=head.values, constraints=list(stored.constraints or []),
        front=[FrontPoint(trial=p.number, params=_params(p), values=values) for p, values in pareto_front(study)]
        if len(study.directions) > 1 else [],
        baseline_value=base_value, baseline_runs=list(base.runs) if base is not None else [], speedup=ratio,
        provenance=attrs.provenance or prov or stored.provenance or {},
        cost=study_cost(stored, thr.mean if thr else None),
        utilisation=_utilisation(stored, result, thr.mean if thr else None, attrs.provenance or prov),
    )


def noise_figure(measured: list[Standing], noise: RunNoise) -> Noise | None:
    """What the study says of the noise: its spread for a run of
    :data:`~autotune.measurement.noise.RUN_SECONDS` where enough runs were measured again, else
    what those runs read (``None`` while nothing was measured more than once)."""
    again = [s for s in measured if s.runs.n > 1]
    own = RunNoise.of(s.runs for s in measured)
    if noise.spread is not None:
        return Noise(spread=noise.spread, run_seconds=RUN_SECONDS, repeats=sum(s.runs.n for s in again),
                     df=noise.df, earlier_df=noise.df - own.df)
    if not again:
        return None
    seen = "; ".join(f"{seen_text(s.runs.values)} (trial {s.trial.number})" for s in again)
    return Noise(seen=seen, run_seconds=RUN_SECONDS, repeats=sum(s.runs.n for s in again), df=noise.df,
                 earlier_df=noise.df - own.df)


def _utilisation(stored: StudyAttrs, result: TrialResult | None, throughput: float | None,
                 prov: dict[str, Any] | None = None) -> Utilisation | None:
    """The FLOP/s of ``throughput`` (a configuration's samples/s) of the model ``result`` counted,
    and their share of the peak of the devices it held."""
    m = result.measurement if result else None
    if m is None or result is None:
        return None
    return utilisation(m.flops_per_sample, throughput, prov or stored.provenance or {},
                       devices_per_trial=stored.devices_per_trial, processes=result.plan.nproc_per_node,
                       nodes=result.plan.nnodes, model_device=m.model_device)


def _params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    result = TrialAttrs.of(trial).result
    return dict(TrialResult.model_validate_json(result).plan.params) if result else dict(trial.params)
