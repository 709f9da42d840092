"""Between-run noise and racing in the study: the baseline measured in more processes early, a
challenger within the noise raced against the incumbent, the best a mean over its runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from autotune.landscapes.replay import replay_study
from autotune.measurement.noise import RunNoise, Runs
from autotune.repeats.racing import NOISE, RACE, RACE_RUNS, Racing
from autotune.results.ranking import Standing, ranked
from autotune.storage.attrs import TrialAttrs

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPE = ROOT / "landscapes" / "inductor-vit.jsonl"
QUIET = RunNoise.of([[100.0, 101.0, 99.0]] * 3)  # +-2% or so
LOUD = RunNoise.of([[100.0, 125.0, 80.0]] * 3)  # +-40% or so


def _config(number: int, *values: float, flaky: bool = False) -> Standing:
    """A configuration as the study holds it: its first trial (number and key) and its runs."""
    trial = SimpleNamespace(number=number, user_attrs={"config_key": f"c{number}"})
    return Standing(trial, Runs(tuple(values)), flaky)


def test_the_better_of_the_first_two_configurations_runs_three_times_where_nothing_is_known_of_the_noise():
    racing = Racing(budget=3, kept=RunNoise())
    assert racing.next([_config(0, 100.0)], 0, set(), maximize=True) is None, "the known-good is not measured yet"
    repeat = racing.next([_config(0, 100.0), _config(1, 150.0)], 0, set(), maximize=True)
    assert repeat is not None and repeat.trial.number == 1 and repeat.why == NOISE
    assert racing.next([_config(0, 100.0), _config(1, 150.0)], 0, {"c1"}, maximize=True) is None, "not twice at once"
    # Once begun, on the same configuration, even where another now leads.
    again = racing.next([_config(0, 100.0), _config(1, 150.0, 140.0), _config(2, 160.0)], 0, set(), maximize=True)
    assert again.trial.number == 1 and again.why == NOISE
    assert racing.next([_config(0, 100.0), _config(1, 150.0, 140.0, 151.0)], 0, set(), maximize=True) is None
    # Where less is better (latency), the lower figure.
    assert racing.next([_config(0, 10.0), _config(1, 15.0)], 0, set(), maximize=False).trial.number == 0


def test_twice_where_an_earlier_study_here_measured_the_noise_and_never_with_race_zero():
    known = Racing(budget=3, kept=QUIET)
    assert known.next([_config(0, 100.0), _config(1, 90.0)], 0, set(), maximize=True).why == NOISE
    assert known.next([_config(0, 100.0, 98.0), _config(1, 90.0)], 0, set(), maximize=True) is None
    assert Racing.of(0.0, 20, RunNoise()).next([_config(0, 100.0), _config(1, 90.0)], 0, set(),
                                                maximize=True) is None, "--race 0 measures nothing again"


def test_a_challenger_within_the_noise_is_raced_alternating_with_the_incumbent_until_one_is_ahead():
    racing = Racing(budget=10, kept=LOUD)
    base, leader = _config(0, 50.0, 50.0, 50.0), _config(1, 100.0, 104.0)
    challenger = _config(2, 106.0)  # ahead of the leader's mean, by less than the noise
    first = racing.next([base, leader, challenger], 0, set(), maximize=True)
    assert first.why == RACE and first.trial.number == 2, "the challenger is measured again first"
    challenger = _config(2, 106.0, 103.0)
    second = racing.next([base, leader, challenger], 1, set(), maximize=True)
    assert second.trial.number == 1, "then the incumbent, alternating"
    # Once each has RACE_RUNS runs and they still cannot be told apart, the race ends.
    tied = [base, _config(1, *([102.0] * RACE_RUNS)), _config(2, *([103.0] * RACE_RUNS))]
    assert racing.next(tied, 2, set(), maximize=True) is None
    # A clear winner (quiet machine): no race.
    quiet = Racing(budget=10, kept=QUIET)
    assert quiet.next([base, _config(1, 100.0, 100.5), _config(2, 80.0)], 0, set(), maximize=True) is None


def test_a_leader_measured_once_within_the_noise_of_the_next_is_raced_against_it_now():
    settled, others = _config(0, 100.0, 101.0, 99.0), [_config(3, 90.0), _config(4, 95.0), _config(5, 80.0)]
    racing = Racing(budget=10, kept=LOUD)
    measured = [settled, _config(1, 150.0), *others]
    assert ranked(measured, LOUD, maximize=True)[0].trial.number == 1, "it leads, its run allowed for"
    again = racing.next(measured, 0, set(), maximize=True)
    assert again.trial.number == 1 and again.why == RACE, "its one run may be luck: it is measured again first"
    # Placed below the settled one by its luck, it still reads higher: the challenger.
    behind = [settled, _config(1, 110.0), *others]
    assert ranked(behind, LOUD, maximize=True)[0].trial.number == 0
    assert Racing(budget=10, kept=LOUD).next(behind, 0, set(), maximize=True).trial.number == 1


def test_a_leader_ahead_beyond_the_noise_is_measured_again_once_the_study_has_its_trials():
    racing = Racing(budget=3, kept=QUIET)
    measured = [_config(0, 50.0, 50.5, 49.5), _config(1, 100.0)]
    assert racing.next(measured, 0, set(), maximize=True) is None
    again = racing.next(measured, 0, set(), maximize=True, finishing=True)
    assert again.trial.number == 1 and again.why == RACE
    # The last of the budget, and two past it where each one measured again falls behind another
    # measured once.
    assert racing.next(measured, 4, set(), maximize=True, finishing=True).trial.number == 1
    assert racing.next(measured, 5, set(), maximize=True, finishing=True) is None, "the budget is spent"


def test_one_lucky_run_counts_for_less_than_three_on_a_noisy_host_and_as_much_on_a_quiet_one():
    settled, lucky = _config(1, 100.0, 101.0, 99.0), _config(2, 104.0)
    others = [_config(3, 90.0), _config(4, 95.0), _config(5, 80.0)]
    # Configurations no further apart than the noise: a run 4% above one measured three times is luck.
    assert [s.trial.number for s in ranked([settled, lucky, *others], LOUD, maximize=True)] == [1, 2, 4, 3, 5]
    assert [s.trial.number for s in ranked([settled, lucky, *others], QUIET, maximize=True)] == [2, 1, 4, 3, 5]
    # One that reads twice as much is not all luck, even measured once.
    assert [s.trial.number for s in ranked([settled, _config(2, 200.0), *others], LOUD, maximize=True)][0] == 2
    # Less is better (latency): the lower mean leads.
    assert ranked([_config(1, 10.0, 10.1), _config(2, 12.0, 12.1)], QUIET, maximize=False)[0].trial.number == 1
    flaky = _config(3, 500.0, flaky=True)
    assert ranked([settled, flaky], QUIET, maximize=True)[-1] is flaky


def test_a_configuration_that_reads_a_quarter_faster_once_leads_the_baseline_measured_three_times():
    """A noise estimate of a few degrees of freedom made "beyond the noise" a factor of 1.4 at a
    spread of 8%: a configuration that read 0.925 of the best once stayed behind the baseline's
    0.73 for the rest of a simulated study (the whole inductor surrogate, seed 1)."""
    noise = RunNoise.of([[0.788, 0.724, 0.684], [0.779, 0.653, 0.706]])
    measured = [_config(0, 0.788, 0.724, 0.684), _config(1, 0.779, 0.653, 0.706), _config(2, 0.448),
                _config(3, 0.686), _config(4, 0.587), _config(5, 0.115), _config(6, 0.720), _config(7, 0.515),
                _config(8, 0.925)]
    assert ranked(measured, noise, maximize=True)[0].trial.number == 8


def _study(result) -> optuna.Study:
    return optuna.load_study(study_name=result.study, storage=result.storage)


def test_a_replayed_study_measures_its_noise_races_and_reports_the_best_as_a_mean(tmp_path) -> None:
    result, pool = replay_study(LANDSCAPE, trials=10, seed=3, noise_seed=3, workdir=tmp_path, race=0.25)
    study = _study(result)
    counted = [t for t in study.trials if TrialAttrs.of(t).counted]
    again = [t for t in study.trials if TrialAttrs.of(t).confirms is not None]
    assert len(counted) == 10 and len(pool.trials) == 10 + len(again), "a re-measurement is not a trial"
    assert (result.ran, result.measured_again) == (10, len(again))
    first_two = sorted((t for t in counted if t.state.name == "COMPLETE"), key=lambda t: t.number)[:2]
    noise = [t for t in again if TrialAttrs.of(t).again == NOISE]
    better = max(first_two, key=lambda t: t.value)
    assert [TrialAttrs.of(t).confirms for t in noise] == [better.number] * 2, \
        "the better of the baseline and the first known-good, in three processes"
    races = [t for t in again if TrialAttrs.of(t).again == RACE]
    assert 1 <= len(races) <= math.ceil(0.25 * 10)
    best = result.best
    assert len(best.runs) >= 2, "the best reported is a mean over runs, not one draw"
    seconds = [r.seconds for r in best.runs]
    assert all(s is not None and s > 0 for s in seconds), seconds
    assert best.value == pytest.approx(sum(r.value * r.seconds for r in best.runs) / sum(seconds), rel=1e-3)
    assert best.throughput == best.value and (best.ci95_low, best.ci95_high) == (best.value_ci95_low,
                                                                                 best.value_ci95_high)
    assert best.value_ci95_low < best.value < best.value_ci95_high
    assert best.noise is not None and best.noise.repeats >= 3 and best.noise.earlier_df == 0
    # The host proved noisy on the first repeat: the note says on how few runs, since its figure is
    # the early one and the noise line's comes from more.
    said = [n for n in result.notes if "each run from now on" in n]
    assert len(said) == 1 and "(on the 3 runs measured so far)" in said[0], result.notes
    base = best.baseline_runs
    assert base and all(r.seconds for r in base)
    assert best.baseline_value == pytest.approx(sum(r.value * r.seconds for r in base) / sum(r.seconds for r in base),
                                                rel=1e-3)
    saved = json.loads((Path(result.out_dir) / "best.json").read_text())
    assert saved["schema_version"] == 2 and saved["noise"]["spread"] == best.noise.spread
    assert [r["value"] for r in saved["runs"]] == [r.value for r in best.runs]
    import csv

    rows = list(csv.DictReader((Path(result.out_dir) / "trials.csv").open()))
    assert sorted(r["again"] for r in rows if r["confirms"]) == sorted(TrialAttrs.of(t).again for t in again)
    assert all(float(r["value_ci95_low"]) < float(r["value"]) < float(r["value_ci95_high"])
               for r in rows if r["value"] and r["value_ci95_low"])
    # One figure per configuration: each of its trials carries its mean and interval, and its own
    # run apart.
    by_key: dict[str, set] = {}
    for t in result.trials:
        if t.value is not None and t.run is not None:
            key = json.dumps(t.params, sort_keys=True)
            by_key.setdefault(key, set()).add((t.value, t.value_ci95_low, t.value_ci95_high, t.runs))
    assert by_key and all(len(figures) == 1 for figures in by_key.values()), by_key
    best_rows = [t for t in result.trials if t.params == best.params and t.run is not None]
    assert {t.run.value for t in best_rows} == {r.value for r in best.runs}
    assert all((t.value, t.runs) == (best.value, len(best.runs)) for t in best_rows)


def test_the_next_study_here_starts_from_the_noise_measured_before(tmp_path) -> None:
    first, _ = replay_study(LANDSCAPE, trials=4, seed=1, noise_seed=1, workdir=tmp_path, study="one")
    files = list((tmp_path / "cache" / "noise").glob("*/*.json"))
    assert len(files) == 1, "the noise is kept in the cache root"
    second, _ = replay_study(LANDSCAPE, trials=4, seed=2, noise_seed=2, workdir=tmp_path, study="two")
    study = _study(second)
    assert study.user_attrs["noise_prior"][1] == first.best.noise.df, "what the first study measured"
    noise = [t for t in study.trials if TrialAttrs.of(t).again == NOISE]
    assert len(noise) == 1, "one run more of the baseline updates what is known"
    assert second.best.noise.earlier_df == first.best.noise.df


def test_a_short_study_or_one_answered_from_remembered_results_measures_nothing_again(tmp_path) -> None:
    short, pool = replay_study(LANDSCAPE, trials=3, seed=3, noise_seed=3, workdir=tmp_path / "short")
    assert len(pool.trials) == 3 and short.measured_again == 0
    first, _ = replay_study(LANDSCAPE, trials=5, seed=3, noise_seed=3, workdir=tmp_path / "twice", study="a")
    assert first.measured_again > 0
    again, pool = replay_study(LANDSCAPE, trials=5, seed=3, noise_seed=3, workdir=tmp_path / "twice", study="b",
                               warm=False)
    assert again.reused == 5 and len(pool.trials) == 0, "every result remembered: nothing runs"


def test_race_zero_measures_nothing_again(tmp_path) -> None:
    result, pool = replay_study(LANDSCAPE, trials=6, seed=3, noise_seed=3, workdir=tmp_path, race=0)
    assert len(pool.trials) == 6
    assert not [t for t in _study(result).trials if TrialAttrs.of(t).confirms is not None]
    assert result.best.noise is None and len(result.best.runs) == 1


def test_the_table_names_each_re_measurement_and_the_best_line_its_runs(tmp_path) -> None:
    import io

    from rich.console import Console

    from autotune.rendering import render_trials

    result, _ = replay_study(LANDSCAPE, trials=6, seed=3, noise_seed=3, workdir=tmp_path)
    out = io.StringIO()
    render_trials(result.study, result.trials, result.baseline_value, result.best, Console(file=out, width=400),
                  all_trials=True)
    text = out.getvalue()
    again = [t for t in result.trials if t.confirms is not None]
    assert again and all(f"[trial {t.confirms} measured again: {t.again}]" in text for t in again), text
    assert f"over {len(result.best.runs)} runs" in text and "noise: one run of 10 s here reads within" in text
