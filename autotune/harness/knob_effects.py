"""Whether each parameter of a trial reached the script: what the harness found to apply it to,
and, for a batch size given as a flag of the script's own, the samples per step it measured.

A parameter that never reached the script (a DataLoader batch size in a loop that slices its own
tensors; a compiler flag whose variable the script set again itself) leaves the script as it was: its trial measured the script's own configuration, which a
reader must be told rather than read as a result of the parameter.
"""

from __future__ import annotations

from autotune.records import BATCH_SIZE_PARAM, INTERCEPTIONS, HarnessReport, KnobEffect, KnobRoute, Measurement, TrialPlan


def knob_effects(plan: TrialPlan, report: HarnessReport | None, ranks: list[HarnessReport]) -> list[KnobEffect]:
    """One :class:`KnobEffect` per parameter the plan has routes for; none without a report."""
    if report is None:
        return []
    # The batch size is each process's: compare it with one process's samples per step.
    own = next((r.measurement for r in ranks if r.measurement is not None), None) if ranks else report.measurement
    overrides = {k: v for r in [report, *ranks] for k, v in r.env_overrides.items()}
    effects = []
    for name, value in plan.params.items():
        routes = plan.routes.get(name)
        if routes is None:
            continue
        if not routes:
            effects.append(KnobEffect(param=name, value=value, took_effect=None,
                                      detail="the script's own value: nothing to apply"))
            continue
        verdicts = [v for v in (_verdict(name, value, r, report, own, overrides) for r in routes) if v is not None]
        shown = next((v for v in verdicts if v[0]), None) or next(iter(verdicts), None)
        effects.append(KnobEffect(param=name, value=value, routes=routes, took_effect=shown[0] if shown else None,
                                  detail=shown[1] if shown else _applied(routes)))
    return effects


def _verdict(name: str, value: object, route: KnobRoute, report: HarnessReport,
             measurement: Measurement | None, overrides: dict[str, str]) -> tuple[bool, str] | None:
    variable = route_variable(route)
    if variable in overrides:
        return False, (f"the script set {variable} itself ({overrides[variable]}), replacing the configuration's "
                       "value: the trial measured the script's own")
    if route.kind == "interception":
        seen = [report.knobs_applied[k] for k in route.knobs if k in report.knobs_applied]
        if not seen:
            return None
        if all(seen):
            return True, f"the harness set {route.detail}"
        missed = sorted({INTERCEPTIONS[k][1] or k for k in route.knobs if not report.knobs_applied.get(k, True)})
        return False, (f"the script {' and '.join(missed)}, so {route.detail} was never set: the trial "
                       f"measured the script's own value (if the script takes it as a flag, --arg {name}=FLAG "
                       "gives it there)")
    if route.kind == "script argument" and name == BATCH_SIZE_PARAM and measurement is not None \
            and isinstance(value, int) and not isinstance(value, bool):
        measured = measurement.samples_per_step
        if abs(measured - value) < 0.5:
            return True, f"{route.detail}: {measured:g} samples per step measured"
        return False, (f"{route.detail}, but {measured:g} samples per step measured: the flag may not be the "
                       "script's batch size, or its model's input does not hold the batch in its first dimension")
    return None


def route_variable(route: KnobRoute) -> str | None:
    """The env var a route sets (a compiler flag's variable, or an env var), else ``None``."""
    if route.kind == "compiler flag":
        return route.detail
    if route.kind == "env var":
        return route.detail.split("=", 1)[0].removesuffix(" unset")
    return None


def _applied(routes: list[KnobRoute]) -> str:
    """What was done where nothing shows whether it acted."""
    done = {"env var": "set in the trial's environment", "compiler flag": "given to the compiler",
            "script argument": "given to the script", "launch": "the script started so",
            "target": "applied by the target", "interception": "set by the harness"}
    return "; ".join(f"{r.detail}: {done[r.kind]}" for r in routes)
