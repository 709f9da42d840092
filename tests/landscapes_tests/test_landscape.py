"""Recording a landscape: every configuration once (or a seeded sample of a large space), resumable,
failures kept with their category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import AutotuneError, SpaceError
from autotune.landscapes.landscape import load_landscape, summary
from autotune.landscapes.recording import RecordOptions, record, recorded_configurations
from autotune.records import MeasurementProtocol
from autotune.search.configurations import enumerate_space, sample_space
from autotune.space import load_space, parse_space

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "scripts" / "tiny_train.py"

SPACE = """\
target: inductor
parameters:
  batch_size: {type: int, choices: [32, 64], default: 32}
  mode: {type: categorical, choices: [eager], default: eager}
  precision: {type: categorical, choices: [fp32, int4], default: fp32}
"""


def test_the_shipped_spaces_are_small_grids_with_failures() -> None:
    for name, size in (("xla-vit", 56), ("inductor-vit", 60)):
        configs = enumerate_space(load_space(REPO / "landscapes" / "spaces" / f"{name}.yaml"))
        assert len(configs) == size >= 48


def test_a_space_with_a_range_cannot_be_enumerated() -> None:
    space = parse_space("target: inductor\nparameters:\n  batch_size: {type: int, low: 8, high: 64}\n")
    with pytest.raises(SpaceError, match="needs every parameter to have 'choices'"):
        enumerate_space(space)


def test_configurations_the_target_rejects_are_not_enumerated() -> None:
    space = parse_space("""\
target: xla
parameters:
  openxla: {type: bool, default: false}
  batches_per_execution: {type: int, choices: [1, 2], default: 1}
""")
    configs = enumerate_space(space)
    assert {"openxla": True, "batches_per_execution": 2} not in configs  # XlaTarget.check rejects it
    assert len(configs) == 3


def test_a_torn_last_line_is_ignored(tmp_path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"kind": "header", "target": "inductor", "space_yaml": SPACE}) + "\n"
                    + json.dumps({"kind": "config", "index": 0, "params": {"batch_size": 32}, "status": "ok",
                                  "throughput": 1.0}) + "\n" + '{"kind": "config", "ind')
    land = load_landscape(path)
    assert [r.index for r in land.records] == [0]


@pytest.mark.slow
def test_a_recording_continues_where_it_stopped_and_keeps_failures(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "space.yaml"
    space_file.write_text(SPACE.replace("fp32, int4", "fp32"))
    out = tmp_path / "tiny.jsonl"
    options = RecordOptions(script=TINY, target="inductor", space=space_file, out=out, args=["--steps", "3000"],
                            trial_timeout=120, protocol=MeasurementProtocol(max_measure_seconds=1.0, min_windows=2),
                            limit=1)
    first = record(options)
    assert len(first.records) == 1
    options.limit = None
    second = record(options)
    assert [r.index for r in second.records] == [0, 1]  # the first configuration was not run again
    assert all(r.ok and r.throughput > 0 and r.wall_seconds > 0 for r in second.records)
    assert summary(second)["ok"] == 2
    other = tmp_path / "other.yaml"
    other.write_text(SPACE)
    with pytest.raises(AutotuneError, match="another target, space"):
        record(RecordOptions(script=TINY, target="inductor", space=other, out=out))


@pytest.mark.slow
def test_a_recording_runs_the_scripts_own_loader_values_once_and_keeps_them(tmp_path, monkeypatch) -> None:
    # tiny_train.py batches by 32 unless told: after its baseline, batch_size 32 is that run again.
    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "space.yaml"
    space_file.write_text("target: inductor\nparameters:\n  batch_size: {type: int, choices: [16, 32]}\n"
                          "  mode: {type: categorical, choices: [eager], default: eager}\n")
    out = tmp_path / "own.jsonl"
    land = record(RecordOptions(script=TINY, target="inductor", space=space_file, out=out, args=["--steps", "3000"],
                                trial_timeout=120, protocol=MeasurementProtocol(max_measure_seconds=1.0, min_windows=2)))
    assert [r.params for r in land.records] == [{"mode": "eager"}, {"batch_size": 16, "mode": "eager"}]
    assert land.header["script_loader"] == {"batch_size": 32, "num_workers": 0}
    # Read back, the header's values are the space's: the unrecorded name answers with its run.
    again = load_landscape(out)
    assert again.get({"batch_size": 32, "mode": "eager"}) is again.get({"mode": "eager"})
    assert again.space.parameters["batch_size"].unset_is == 32
    assert len(record(RecordOptions(script=TINY, target="inductor", space=space_file, out=out,
                                    args=["--steps", "3000"])).records) == 2, "continued: nothing left to run"


WIDE = """\
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32, 64]}
  num_workers: {type: int, choices: [0, 1]}
  mode: {type: categorical, choices: [eager, default]}
  cpp_simdlen: {type: int, choices: [128, 256], when: {mode: [default]}}
  precision: {type: categorical, choices: [fp32, bf16_autocast], default: fp32}
known_good:
  - {mode: default}
"""


def test_a_sample_starts_with_the_baseline_and_known_good_and_keeps_the_conditions() -> None:
    space = parse_space(WIDE)
    configs = sample_space(space, 20, seed=3)
    assert configs[:2] == [{"precision": "fp32"}, {"mode": "default", "precision": "fp32"}]
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 20
    for c in configs:
        assert space.validate(c) == c  # valid: cpp_simdlen only with a compiled mode
        assert "cpp_simdlen" not in c or c["mode"] == "default"
    assert sample_space(space, 20, seed=3) == configs, "the same seed, the same sample"
    assert sample_space(space, 30, seed=3)[:20] == configs, "a larger sample extends a smaller one"
    assert sample_space(space, 20, seed=4) != configs
    # every value of every parameter shows up: the sample fills the space
    assert {c.get("batch_size") for c in configs} == {None, 16, 32, 64}
    assert {c.get("cpp_simdlen") for c in configs} == {None, 128, 256}
    # a space with fewer configurations than asked gives them all
    assert len(sample_space(space, 10_000, seed=0)) == len(enumerate_space(space)) == 4 * 3 * 2 * (1 + 1 + 3)
    assert len(sample_space(space.restrict({"num_workers": 0}), 1_000, seed=0)) == 40
    # a grid larger than the sample whose conditions leave fewer: the sample stops short
    narrow = parse_space(WIDE).restrict({"mode": "eager", "num_workers": 0, "precision": "fp32"})
    assert len(sample_space(narrow, 5, seed=0)) == 4 < 5 < 4 * 3


def test_the_built_in_spaces_are_too_large_for_a_grid(tmp_path) -> None:
    space = REPO / "autotune" / "search_spaces" / "xla.yaml"
    with pytest.raises(AutotuneError, match="record a sample of it with --sample"):
        recorded_configurations(load_space(space), RecordOptions(script=TINY, target="xla", space=space,
                                                                 out=tmp_path / "x.jsonl"))
    configs = recorded_configurations(load_space(space), RecordOptions(
        script=TINY, target="xla", space=space, out=tmp_path / "x.jsonl", sample=150))
    assert len(configs) == 150 and configs[0] == load_space(space).defaults()


def _fake_trial(calls: list[dict]):
    """A stand-in for the trial launcher: no process, a throughput that depends on the batch size."""
    from autotune.records import CompileStats, Measurement, TrialResult

    def run_trial(plan, script, args, **_):
        calls.append(dict(plan.params))
        batch = plan.params.get("batch_size") or 8
        m = Measurement(throughput=10.0 * batch, ci95_low=9.0 * batch, ci95_high=11.0 * batch,
                        step_time_median=0.1, step_time_p90=0.1, samples_per_step=batch, steps_measured=10,
                        windows=4, converged=True, warmup_steps=4, warmup_seconds=0.5)
        return TrialResult(status="ok", plan=plan, wall_seconds=2.0, measurement=m,
                           compile=CompileStats(graphs_compiled=1, compile_seconds=1.0))
    return run_trial


def _wide_recording(tmp_path, monkeypatch) -> tuple[list[dict], Path, Path]:
    """A recording of WIDE in ``tmp_path`` through the stand-in launcher: (its calls, the space file, out)."""
    monkeypatch.chdir(tmp_path)
    calls: list[dict] = []
    monkeypatch.setattr("autotune.workers.launcher.run_trial", _fake_trial(calls))
    space_file = tmp_path / "wide.yaml"
    space_file.write_text(WIDE)
    return calls, space_file, tmp_path / "wide.jsonl"


def test_a_sampled_recording_runs_its_sample_in_order_and_continues_it(tmp_path, monkeypatch) -> None:
    calls, space_file, out = _wide_recording(tmp_path, monkeypatch)
    options = RecordOptions(script=TINY, target="inductor", space=space_file, out=out, sample=8, seed=5, limit=3)
    first = record(options)
    sample = sample_space(parse_space(WIDE), 12, seed=5)
    assert calls == sample[:3]
    assert [r.index for r in first.records] == [0, 1, 2]
    assert first.header["sample"] == {"n": 8, "seed": 5} and first.header["configurations"] == 8
    options.limit = None
    second = record(options)  # continues: the first three are not run again
    assert calls == sample[:8] and [r.params for r in second.records] == sample[:8]
    options.sample = 12  # a larger sample of the same seed: the four after those
    third = record(options)
    assert calls == sample and [r.index for r in third.records] == list(range(12))
    assert third.header["sample"] == {"n": 12, "seed": 5} and third.header["configurations"] == 12
    options.seed = 6
    with pytest.raises(AutotuneError, match="a sample of seed 5"):
        record(options)
    options.sample = None
    with pytest.raises(AutotuneError, match="a sample of seed 5"):
        record(options)


def test_a_refined_recording_measures_what_its_surrogate_predicts_best(tmp_path, monkeypatch) -> None:
    pytest.importorskip("sklearn")
    calls, space_file, out = _wide_recording(tmp_path, monkeypatch)
    space = parse_space(WIDE)
    options = RecordOptions(script=TINY, target="inductor", space=space_file, out=out, sample=8, seed=5, refine=3)
    land = record(options)
    sample = sample_space(space, 8, seed=5)
    assert calls[:8] == sample and len(calls) == 11
    assert [r.index for r in land.records] == list(range(11))
    assert land.header["refine"] == 3 and summary(land)["expected"] == 11
    refined = calls[8:]
    keys = [json.dumps(space.validate(c), sort_keys=True) for c in calls]
    assert len(set(keys)) == 11, "a refinement is a configuration not recorded before"
    # the fake trial's throughput grows with the batch size: the surrogate's best is at the largest
    assert all(c["batch_size"] == 64 for c in refined), refined
    assert all(space.validate(c) == c for c in refined)
    record(options)  # continued with the same --refine: nothing more to run
    assert len(calls) == 11
    options.refine = 4
    assert len(record(options).records) == 12 and calls[11]["batch_size"] == 64
    with pytest.raises(AutotuneError, match="--refine continues a sample"):
        record(RecordOptions(script=TINY, target="inductor", space=space_file, out=tmp_path / "g.jsonl", refine=2))


def test_a_repeated_recording_measures_its_top_again_until_the_top_by_mean_has_two_each(tmp_path, monkeypatch) -> None:
    """--repeat: a lucky first draw that falls back on its second measurement makes room for the
    next; a continued recording runs nothing twice; each repeat has a trial folder of its own."""
    from autotune.records import CompileStats, Measurement, TrialResult

    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "wide.yaml"
    space_file.write_text(WIDE)
    first: dict[str, float] = {}
    calls: list[tuple[str, Path]] = []

    def run_trial(plan, script, args, *, trial_dir, **_):
        key = json.dumps(dict(plan.params), sort_keys=True)
        again = key in first
        # each configuration's first figure is the order it ran in (100, 101, ...); measured again
        # it gives that figure back, except the first one measured again, which falls to 1
        value = first.setdefault(key, 100.0 + len(first))
        if again and not any(c[0] == "again" for c in calls):
            value = 1.0
        calls.append(("again" if again else "first", Path(trial_dir)))
        m = Measurement(throughput=value, ci95_low=0.9 * value, ci95_high=1.1 * value, step_time_median=0.1,
                        step_time_p90=0.1, samples_per_step=8, steps_measured=10, windows=4, converged=True,
                        warmup_steps=4, warmup_seconds=0.5)
        return TrialResult(status="ok", plan=plan, wall_seconds=2.0, measurement=m,
                           compile=CompileStats(graphs_compiled=1, compile_seconds=1.0))

    monkeypatch.setattr("autotune.workers.launcher.run_trial", run_trial)
    out = tmp_path / "wide.jsonl"
    options = RecordOptions(script=TINY, target="inductor", space=space_file, out=out, sample=8, seed=5, repeat=2)
    land = record(options)
    # the top two are 107 (index 7) and 106 (6); 7 falls to 1 (mean 54), so 6 and then 5 are measured again
    assert [r.index for r in land.records] == [*range(8), 7, 6, 5]
    assert [r.throughput for r in land.records[8:]] == [1.0, 106.0, 105.0]
    assert land.header["repeat"] == 2
    assert len({d for _, d in calls}) == len(calls), "a repeat has a trial folder of its own"
    assert len(record(options).records) == 11  # continued: the top two by mean have two measurements each
    s = summary(land)  # the best by its mean, not the luckiest single run (107, then 1)
    assert s["best"]["throughput"] == 106.0 and s["best"]["runs"] == 2
    assert land.best().throughput == 106.0 and land.best().index == 6, "the best a replay measures against"
    assert land.get(land.records[7].params).throughput == 54.0, "and what a replay answers: the mean"
    assert (s["configurations"], s["measurements"], s["expected"]) == (8, 11, 8)
    options.repeat = 3
    land = record(options)
    assert [r.index for r in land.records[11:]] == [4] and land.header["repeat"] == 3
    with pytest.raises(AutotuneError, match="--repeat must be at least 1"):
        record(RecordOptions(script=TINY, target="inductor", space=space_file, out=out, sample=8, seed=5, repeat=0))
