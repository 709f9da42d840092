"""The end of a study says what it found and whether a longer one would likely find more, from
its own trials: improvements beyond the noise, knobs never tried, the model's expected gain."""

from __future__ import annotations

import io

import optuna
from rich.console import Console

from autotune.records import Measurement, TrialPlan, TrialResult
from autotune.rendering import render_study
from autotune.space import parse_space
from autotune.results.outlook import search_outlook
from autotune.results.outputs import BestConfig, RunFigure, TrialSummary
from autotune.study.outcome import study_result
from autotune.storage.attrs import trial_attrs, write

SPACE = parse_space("""\
target: xla
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64], default: 16}
  precision: {type: categorical, choices: [fp32, bf16_model], default: fp32}
  fast_math: {type: bool}
  xnnpack: {type: bool}
""")
KNOBS = [{"batch_size": 32}, {"batch_size": 64}, {"precision": "bf16_model"}, {"fast_math": True},
         {"xnnpack": True}, {"batch_size": 8}]


def trials(values: list[float | None], knobs: list[dict] | None = None, spread: float = 0.02) -> list[TrialSummary]:
    """Trials 0.. with these values (None: failed), each with a ±``spread`` interval, changing the
    knobs of ``knobs`` in turn (trial 0: the baseline)."""
    knobs = knobs or KNOBS
    out = []
    for i, v in enumerate(values):
        params = {"batch_size": 16, "precision": "fp32", **(knobs[(i - 1) % len(knobs)] if i else {})}
        out.append(TrialSummary(number=i, state="COMPLETE" if v is not None else "FAIL", params=params, value=v,
                                throughput=v, ci95_low=v * (1 - spread) if v else None,
                                ci95_high=v * (1 + spread) if v else None, category=None if v else "crash"))
    return out


def best_of(ts: list[TrialSummary]) -> BestConfig:
    t = max((t for t in ts if t.value is not None), key=lambda t: t.value)
    return BestConfig(study="s", trial=t.number, target="xla", params=t.params, env={}, metric="throughput",
                      value=t.value, runs=[RunFigure(trial=t.number, value=t.value)], baseline_value=ts[0].value,
                      speedup=t.value / ts[0].value)


def test_a_best_that_still_improves_with_knobs_never_tried_is_likely_to_improve_more() -> None:
    ts = trials([350, 500, 600, 580, 700, 720, 900, 1193], knobs=KNOBS[:3] + [{"batch_size": 8}])
    o = search_outlook(ts, SPACE, best_of(ts))
    assert o.verdict == "more_likely" and o.trials == 8 and o.trials_since_improvement == 0
    assert o.untried_knobs == ["fast_math", "xnnpack"] and o.suggested_trials == 20
    assert o.line == ("8 trials: best 1,193.0 samples/s (3.41x the baseline) at trial 7; the best improved beyond "
                      "the noise at the last trial, 2 knobs were never tried away from the baseline (fast_math, "
                      "xnnpack): --trials 20 is likely to find more")


def test_no_improvement_beyond_the_noise_for_a_while_looks_converged() -> None:
    # trial 2 jumps; the rest wander within ±2% of it (the 1.5% gain at trial 9 is inside the noise)
    ts = trials([500, 700, 1000, 990, 1005, 980, 1010, 995, 1000, 1015, 990, 1000, 985, 1003])
    o = search_outlook(ts, SPACE, best_of(ts), expected_gain=0.001)
    assert o.trials_since_improvement == 11 and not o.untried_knobs
    assert o.verdict == "converged" and o.suggested_trials is None
    assert o.line.endswith("no improvement beyond the noise in the last 11 trials, every knob was tried away from "
                           "the baseline, autotune's model expects +0.1% from the next trial: the search looks converged")


def test_a_few_trials_are_never_called_converged() -> None:
    ts = trials([1000, 990, 1001, 995, 998])
    o = search_outlook(ts, SPACE, best_of(ts))
    assert o.verdict == "more_likely"
    assert "too few trials to tell whether the search converged: --trials 20" in o.line


def test_the_models_expected_gain_alone_says_more_is_likely() -> None:
    ts = trials([500, 700, 1000, 990, 1005, 980, 1010, 995, 1000, 1015, 990, 1000, 985, 1003])
    o = search_outlook(ts, SPACE, best_of(ts), expected_gain=0.08)
    assert o.verdict == "more_likely" and "expects +8.0% from the next trial: --trials 30 is likely" in o.line


def test_after_many_quiet_trials_an_expected_gain_inside_the_noise_is_no_evidence() -> None:
    # As the main job continued to 30 trials: nothing beyond the noise (±16% here) for 11 trials,
    # and a model that still expects a few percent, less than that noise.
    ts = trials([500, 700, 1000, 990, 1005, 980, 1010, 995, 1000, 1015, 990, 1000, 985, 1003], spread=0.16)
    o = search_outlook(ts, SPACE, best_of(ts), expected_gain=0.026)
    assert o.trials_since_improvement == 11 and o.verdict == "unclear"
    assert o.line.endswith("expects +2.6% from the next trial: a longer study (--trials 30) may still find more")
    # Beyond the noise it is evidence however quiet the study was.
    assert search_outlook(ts, SPACE, best_of(ts), expected_gain=0.2).verdict == "more_likely"


def test_between_the_two_it_says_so() -> None:
    # the last improvement beyond the noise 4 trials before the end of 12: not recent, not long ago
    ts = trials([500, 600, 700, 750, 800, 850, 900, 1000, 1001, 1002, 999, 1000])
    o = search_outlook(ts, SPACE, best_of(ts))
    assert o.trials_since_improvement == 4 and o.verdict == "unclear"
    assert o.line.endswith("a longer study (--trials 30) may still find more")


def test_failures_count_as_trials_and_invalid_or_duplicate_ones_do_not() -> None:
    ts = trials([1000, None, 1001, 999, None, 1002, 998, 1000, 1001, 997])
    ts.append(TrialSummary(number=10, state="FAIL", params={}, category="invalid_config"))
    ts.append(TrialSummary(number=11, state="COMPLETE", params={}, value=5000.0, duplicate_of=3))
    o = search_outlook(ts, SPACE, best_of(ts[:10]))
    assert o.trials == 10 and o.trials_since_improvement == 9


def test_a_study_that_minimises_improves_downwards() -> None:
    ts = trials([10.0, 9.0, 8.0, 7.9, 8.1, 5.0], spread=0.0)
    o = search_outlook(ts, SPACE, None, metric="latency_p50", maximize=False)
    assert o.trials_since_improvement == 0
    assert o.line.startswith("6 trials: no configuration ran")  # no best given


def test_the_result_of_a_study_carries_it_and_the_printout_shows_it(tmp_path) -> None:
    study = optuna.create_study(direction="maximize")
    write(study, baseline_key='{"batch_size":16}')
    dist = {"batch_size": optuna.distributions.CategoricalDistribution([8, 16, 32, 64])}
    for i, (bs, v) in enumerate([(16, 100.0), (32, 180.0), (64, 300.0)]):
        study.add_trial(optuna.trial.create_trial(params={"batch_size": bs}, distributions=dist, value=v,
                                                  user_attrs=trial_attrs(config_key=f'{{"batch_size":{bs}}}',
                                                                         counted=True)))
    result = study_result(study, name="s", storage="memory", target="xla", out=tmp_path, provenance={}, notes=[],
                          ran=3, reused=0, space=SPACE)
    assert result.outlook is not None and result.outlook.trials == 3 and result.outlook.verdict == "more_likely"
    assert type(result).model_validate_json(result.model_dump_json()).outlook == result.outlook
    out = io.StringIO()
    render_study(result, Console(file=out, width=300))
    assert "search: 3 trials: best 300.0 samples/s (3.00x the baseline) at trial 2;" in out.getvalue()


def test_a_first_trial_that_nothing_beat_is_not_called_an_improvement() -> None:
    ts = trials([293.3, 216.6])
    o = search_outlook(ts, SPACE, best_of(ts))
    assert o.verdict == "more_likely" and o.trials_since_improvement == 1
    assert "no trial beat the first one beyond the noise in the 1 trial after it" in o.line
    assert "improved beyond the noise 1 trial ago" not in o.line


def test_a_best_measured_once_with_a_wide_interval_is_noted_with_the_interval_the_best_line_shows(tmp_path) -> None:
    # The best line shows the interval on the logarithms (wider upwards); the note once printed the
    # run's own, symmetric one beside it: 671.4 .. 909.8 in the line, 671.4 .. 891.7 in the note.
    study = optuna.create_study(direction="maximize")
    dist = {"batch_size": optuna.distributions.CategoricalDistribution([16, 64])}
    for bs, value, rel in ((16, 208.9, 0.04), (64, 781.5, 0.141)):
        measured = TrialResult(status="ok", plan=TrialPlan(target="xla", params={"batch_size": bs}),
                               measurement=Measurement(
                                   throughput=value, ci95_low=value * (1 - rel), ci95_high=value * (1 + rel),
                                   step_time_median=bs / value, step_time_p90=bs / value, samples_per_step=bs,
                                   steps_measured=100, windows=5, converged=False, warmup_steps=3,
                                   warmup_seconds=1.0))
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": bs}, distributions=dist, value=value,
            user_attrs=trial_attrs(config_key=f'{{"batch_size":{bs}}}', counted=True,
                                   result=measured.model_dump_json())))
    result = study_result(study, name="s", storage="memory", target="xla", out=tmp_path, provenance={}, notes=[],
                          ran=2, reused=0)
    best = result.best
    assert best is not None and best.trial == 1
    low, high = best.value_ci95_low, best.value_ci95_high
    assert low is not None and high is not None and high / best.value - 1 > 0.141
    note = next(n for n in result.notes if "may be a lucky draw" in n)
    assert note.startswith(f"trial 1's 95% interval is {low:,.1f} .. {high:,.1f} (within -14% to +16% of its value)"), note
    out = io.StringIO()
    render_study(result, Console(file=out, width=300))
    assert f"[{low:,.1f}, {high:,.1f}]" in out.getvalue()
