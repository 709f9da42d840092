"""End-to-end studies on this machine: a real local Ray, SQLite, and real trial processes."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import jsonschema
import optuna
import pytest

from autotune.cli.outputs_reference import PAGE, alternatives, is_model
from autotune.records import HarnessReport, MeasurementProtocol
from autotune.results.outputs import SCHEMA_FILE, BestConfig
from autotune.study.study import tune
from autotune.study.options import StudyResult

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = ROOT / "tests" / "scripts"

pytestmark = pytest.mark.slow

TWO_POINT_SPACE = """
target: inductor
parameters:
  batch_size:
    type: int
    choices: [16, 64]
  mode:
    type: categorical
    choices: [eager]
    default: eager
"""


#: The ViT examples' studies check what a study does with its trials, not how exactly they measure:
#: a few seconds of measuring each, where the default measures up to 30 s to a 2% interval.
QUICK = MeasurementProtocol(max_measure_seconds=3.0)


def _check_outputs(result: StudyResult) -> BestConfig:
    out = Path(result.out_dir)
    best = BestConfig.model_validate_json((out / "best.json").read_text())
    assert best.value == result.best.value
    env = (out / "best.env").read_text()
    assert "export AUTOTUNE_PARAMS=" in env
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == len(result.trials)
    assert best.provenance["script_sha256"] and best.provenance["versions"]["torch"]
    _check_the_reference(out)
    return best


def _check_the_reference(out: Path) -> None:
    """Every key of the study's best.json (nested ones too), every column of its trials.csv, every
    variable of its best.env and every key of its first trial's report.json is in the reference page, and
    best.json validates against the schema the package ships."""
    page = (ROOT / PAGE).read_text()
    best = json.loads((out / "best.json").read_text())
    schema = json.loads(resources.files("autotune").joinpath(SCHEMA_FILE).read_text())
    jsonschema.Draft202012Validator(schema).validate(best)
    assert _undocumented(best, schema, schema["$defs"], _tables(page, "`best.json`")) == []
    report_schema = HarnessReport.model_json_schema(mode="serialization")
    report = json.loads(sorted((out / "trials").glob("*/report.json"))[0].read_text())
    assert _undocumented(report, report_schema, report_schema.get("$defs", {}),
                         _tables(page, "A trial's `report.json`")) == []
    columns = next(csv.reader((out / "trials.csv").open()))
    assert set(columns) - _tables(page, "`trials.csv`")[""] == set()
    variables = set(re.findall(r"^export (\w+)=", (out / "best.env").read_text(), re.M))
    named = {f"AUTOTUNE_{name.upper()}" for name in best["params"]} | set(best["env"])
    assert variables - named - _tables(page, "`best.env`")[""] == set()
    assert named - set(best["env"]) <= variables, "an AUTOTUNE_<KNOB> for each parameter"


def _tables(page: str, heading: str) -> dict[str, set[str]]:
    """The keys each table of the page's section ``heading`` names, by each path in the table's
    heading ("" for the section's first table)."""
    section = page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, set[str]] = {}
    for i, part in enumerate(section.split("\n### ")):
        head, _, body = part.partition("\n")
        keys = set(re.findall(r"^\| `([^`]+)` \|", body, re.M))
        for path in re.findall(r"`([^`]+)`", head) if i else [""]:
            tables[path] = keys
    return tables


def _undocumented(value: object, schema: dict, defs: dict, tables: dict[str, set[str]], path: str = "") -> list[str]:
    """The keys under ``value`` (at ``path``, of ``schema``) that no table names: a model's keys
    must be in the table of its path; a mapping's keys are data, its values are looked into."""
    for alt in alternatives(schema, defs):
        if isinstance(value, dict) and is_model(alt):
            missing = [f"{path}.{key}" for key in value if key not in tables.get(path, set())]
            for key, item in value.items():
                missing += _undocumented(item, alt["properties"].get(key, {}), defs, tables,
                                         f"{path}.{key}" if path else key)
            return missing
        if isinstance(value, dict) and alt.get("type") == "object":
            inner = alt.get("additionalProperties")
            return [m for item in value.values() if isinstance(inner, dict)
                    for m in _undocumented(item, inner, defs, tables, f"{path}.*")]
        if isinstance(value, list) and alt.get("type") == "array":
            return [m for item in value for m in _undocumented(item, alt.get("items", {}), defs, tables, f"{path}[]")]
    return []


def test_xla_study_of_the_vit_example(ray_cluster, tmp_path, monkeypatch) -> None:
    home = os.environ.get("AUTOTUNE_MAIN_JOB_DIR")
    if home:
        # .ci/run has just run the README's main job, this very study of 2 trials (with the default
        # measurement): continued to its 2 trials it runs nothing more, and it is checked as it is.
        monkeypatch.chdir(home)
        result = tune(EXAMPLES / "vit_xla_train.py", trials=2, target="xla", seed=0)
        assert result.ran == 0, "a study that holds its trials runs nothing"
        pinned: dict[str, object] = {}
    else:
        monkeypatch.chdir(tmp_path)
        pinned = {"num_workers": 0, "openxla": False}
        result = tune(EXAMPLES / "vit_xla_train.py", trials=2, target="xla", seed=0, sets=pinned, protocol=QUICK)
        assert result.ran == 2
    assert result.exit_code == 0, result.trials
    # openxla=false is what leaving it unset gives (unset_is), so the pinned baseline does not name it.
    baseline = {"batches_per_execution": 1, "precision": "fp32", **{k: v for k, v in pinned.items() if k != "openxla"}}
    assert result.trials[0].params == baseline, "trial 0 is the baseline"
    assert result.trials[1].params["batch_size"] == 64, "the known-good points come next"
    assert result.baseline_value and result.best.value >= result.baseline_value
    best = _check_outputs(result)
    assert best.speedup >= 1.0
    assert Path(".autotune/autotune.db").exists(), "default storage is SQLite under .autotune/"
    _check_the_job_afterwards(result, best)


def _check_the_job_afterwards(result: StudyResult, best: BestConfig) -> None:
    """The example run on its own after the study, with `source best.env` and with `autotune exec`,
    gets the best's batch size: its own epoch line counts 2,048 images in steps of that batch."""
    out = Path(result.out_dir)
    steps = 2048 // best.params.get("batch_size", 16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") and k != "PJRT_DEVICE"}
    script = EXAMPLES / "vit_xla_train.py"
    for command in (["bash", "-c", f"source {out / 'best.env'} && python {script} --epochs 1"],
                    [sys.executable, "-m", "autotune.cli", "exec", str(out / "best.json"), "--",
                     sys.executable, str(script), "--epochs", "1"]):
        job = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert job.returncode == 0, job.stderr[-2000:]
        assert f"epoch 1: {steps} steps" in job.stdout, job.stdout
        assert f"applying study {best.study}, trial {best.trial}" in job.stderr


def test_inductor_study_of_the_vit_example(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    # Baseline (the script's own eager loop) and the space's first known-good point (compiled).
    result = tune(EXAMPLES / "vit_train.py", trials=2, target="inductor", seed=0, protocol=QUICK)
    assert result.exit_code == 0, result.trials
    compiled = [t for t in result.trials if t.params.get("mode") == "default"]
    assert compiled and compiled[0].state == "COMPLETE"
    assert compiled[0].compile_seconds and compiled[0].compile_seconds > 0
    assert result.best.value >= result.baseline_value
    _check_outputs(result)


def test_measured_configurations_are_not_run_again(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "two.yaml"
    space.write_text(TWO_POINT_SPACE)
    # Three configurations exist (the script's own batch size, 16, 64); asking for five ends
    # once each has been measured.
    # race=0: a re-measurement of the noise or of a race is the study running a configuration
    # again on purpose, which this test is not about; it would only make the study longer.
    result = tune(SCRIPTS / "tiny_train.py", trials=5, target="inductor", space=str(space), seed=0, race=0)
    assert result.ran == 3
    assert result.outlook.verdict == "exhausted" and "nothing new" in result.outlook.line, result.outlook
    assert not result.outlook.untried_knobs, "mode has one value: there is nowhere else to try it"
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    keys = [t.user_attrs["config_key"] for t in study.trials if t.user_attrs.get("counted")]
    assert len(keys) == len(set(keys)) == 3
    dups = [t for t in study.trials if t.user_attrs.get("duplicate_of") is not None]
    for t in dups:
        original = study.trials[t.user_attrs["duplicate_of"]]
        assert t.user_attrs["config_key"] == original.user_attrs["config_key"]
        assert t.value == original.value, "Optuna is told the earlier result"

    again = tune(SCRIPTS / "tiny_train.py", trials=3, target="inductor", space=str(space), seed=0, race=0)
    assert again.ran == 0, "a study that already holds its trials runs nothing"
    assert again.best.value == result.best.value


def test_neuron_trials_hold_disjoint_core_ranges(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = tune(SCRIPTS / "sleepy_train.py", trials=4, target="neuron", platform="trn1",
                  cores_per_trial=2, seed=0, sets={"batches_per_execution": 1, "precision": "fp32"})
    ran = [t for t in result.trials if t.duplicate_of is None and t.state in ("COMPLETE", "FAIL")]
    assert len(ran) == 4
    ranges = [t.env.get("NEURON_RT_VISIBLE_CORES") for t in ran]
    assert sorted(ranges) == ["0-1", "2-3", "4-5", "6-7"], ranges
    assert all("NEURON_CC_FLAGS" in t.env and "--target=trn1" in t.env["NEURON_CC_FLAGS"] for t in ran)
    assert max(t.started_at for t in ran) < min(t.ended_at for t in ran), "the four trials ran at once"


def test_a_killed_driver_resumes_keeping_completed_trials(tmp_path) -> None:
    """Its trials wait at a gate of the test's: two tickets let two through, the third is held
    when the driver is killed."""
    space = tmp_path / "space.yaml"
    space.write_text(TWO_POINT_SPACE.replace("[16, 64]", "[8, 16, 32, 64, 128]"))
    gate = tmp_path / "gate"
    gate.mkdir()
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "gated_train.py"), "--trials", "5",
           "--target", "inductor", "--space", str(space), "--seed", "0", "--study", "resume",
           "--env", f"AUTOTUNE_TEST_GATE={gate}",
           # No re-measurements (noise, races): the resume is about the trials, and the study is shorter.
           "--race", "0"]
    storage = f"sqlite:///{tmp_path / '.autotune' / 'autotune.db'}"
    for ticket in range(2):
        (gate / f"ticket-{ticket}").touch()
    driver = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    completed_before: dict[int, float] = {}
    deadline = time.monotonic() + 240
    while not (completed_before and list(gate.glob("waiting-*"))):
        assert time.monotonic() < deadline and driver.poll() is None, "the driver never held its third trial"
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="resume", storage=storage)
        except Exception:
            continue
        done = {t.number: t.value for t in study.trials if t.state.name == "COMPLETE"}
        completed_before = done if len(done) >= 2 else {}
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert len(completed_before) == 2
    (gate / "open").touch()

    rerun = subprocess.run([*cmd, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    result = StudyResult.model_validate_json(rerun.stdout)
    by_number = {t.number: t for t in result.trials}
    for number, value in completed_before.items():
        assert by_number[number].state == "COMPLETE" and by_number[number].value == value
    counted = [t for t in result.trials if t.state in ("COMPLETE", "FAIL") and t.duplicate_of is None
               and (t.value is not None or t.category)]
    assert len([t for t in counted if t.state == "COMPLETE"]) >= 5


def test_run_into_a_log_prints_a_line_per_trial_as_it_ends(tmp_path) -> None:
    """Output sent to a file or a pipe (a CI log, a Ray job): each trial's line arrives while the
    study runs, with its value in samples/s, its status and the best so far."""
    space = tmp_path / "space.yaml"
    space.write_text(TWO_POINT_SPACE)
    gate = tmp_path / "gate"  # one ticket: the second trial waits there until the first line is read
    gate.mkdir()
    (gate / "ticket-0").touch()
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "gated_train.py"), "--trials", "2",
           "--target", "inductor", "--space", str(space), "--seed", "0", "--env", f"AUTOTUNE_TEST_GATE={gate}"]
    driver = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = driver.stderr.readline()
        running_after_first = driver.poll() is None
        (gate / "open").touch()
        rest = driver.communicate(timeout=300)[1]
    finally:
        driver.kill()
    assert driver.returncode == 0, first + rest
    assert running_after_first, "the first trial's line came only when the study had ended"
    lines = [ln for ln in (first + rest).splitlines() if " trial " in ln]
    assert len(lines) == 2, first + rest
    assert "trial 0 (1/2): " in lines[0] and "; baseline | best " in lines[0], lines[0]
    assert "trial 1 (2/2): " in lines[1] and "batch_size=" in lines[1], lines[1]
    for line in lines:
        assert line.count("samples/s") == 2 and (", ok;" in line or ", pruned;" in line), line
