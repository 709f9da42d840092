"""What a study's results rest on: the script, its arguments and the environment they were measured
in, the caller's env vars that reach each trial, and a measurement kept when its trial was taken
for lost."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autotune.records import MeasurementProtocol

from .test_script_flags_study import InProcessPool, tune_on

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SHORT = MeasurementProtocol(max_measure_seconds=1.0, max_measure_steps=200)
EAGER = """
target: inductor
parameters:
  mode: {type: categorical, choices: [eager], default: eager}
"""


def test_an_edited_script_is_measured_in_a_study_of_its_own(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(EAGER)
    script = tmp_path / "train.py"
    shutil.copy(SCRIPTS / "tiny_train.py", script)
    pool = InProcessPool(None)

    def run():
        return tune_on(pool, script, "--steps", "300", trials=1, target="inductor", space="space.yaml", seed=0,
                    protocol=SHORT)

    first = run()
    assert (first.study, first.ran) == ("train-inductor", 1)
    assert run().ran == 0, "the same script is not measured twice"

    # Its hidden layer narrowed: the same command measures it anew, in a study of its own.
    script.write_text(script.read_text().replace("Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128,",
                                                 "Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96,"))
    edited = run()
    assert edited.ran == 1 and edited.reused == 0
    assert edited.study.startswith("train-inductor-") and edited.study != first.study
    assert [n for n in edited.notes if "changed since study train-inductor was measured" in n] == [
        f"the script train.py changed since study train-inductor was measured: this run measures study {edited.study}"]
    best = json.loads((Path(edited.out_dir) / "best.json").read_text())
    assert best["provenance"]["script_sha256"] == edited.best.provenance["script_sha256"] \
        != first.best.provenance["script_sha256"]
    assert run().ran == 0 and run().study == edited.study, "the edited script's study continues as any other"

    # Another project's train.py, in the same database: a study of its own too.
    other = tmp_path / "other" / "train.py"
    other.parent.mkdir()
    other.write_text(script.read_text().replace("Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96,",
                                                "Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256,"))
    theirs = tune_on(pool, other, "--steps", "300", trials=1, target="inductor", space="space.yaml", seed=0,
                  protocol=SHORT)
    assert theirs.ran == 1 and theirs.study not in (first.study, edited.study)

    # Other arguments are another measurement as well.
    longer = tune_on(pool, script, "--steps", "350", trials=1, target="inductor", space="space.yaml", seed=0,
                  protocol=SHORT)
    assert longer.ran == 1 and any("and its arguments changed" in n for n in longer.notes), longer.notes


def test_trials_run_in_the_callers_environment_and_their_results_key_it(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NEURON_CC_FLAGS", "--optlevel 1 --enable-saturate-infinity")
    pool = InProcessPool(None)
    sets = {"model_type": "transformer", "optlevel": 3}

    def run():
        return tune_on(pool, SCRIPTS / "sleepy_train.py", trials=1, target="neuron", platform="trn1", sets=sets, seed=0,
                    protocol=SHORT)

    first = run()
    # The user's flags are kept, the configuration's win on the same flag, and they travel in the plan.
    assert pool.results[0].plan.env["NEURON_CC_FLAGS"] == \
        "--target=trn1 --model-type=transformer --optlevel=3 --enable-saturate-infinity"
    assert first.trials[0].env["NEURON_CC_FLAGS"] == pool.results[0].plan.env["NEURON_CC_FLAGS"]
    import optuna

    stored = optuna.load_study(study_name=first.study, storage=first.storage).trials[0].user_attrs["provenance"]
    assert stored["env"] == {"NEURON_CC_FLAGS": "--optlevel 1 --enable-saturate-infinity"}

    # Other flags of the user's: another result, in a study of its own.
    monkeypatch.setenv("NEURON_CC_FLAGS", "--enable-saturate-infinity --verbose=35")
    again = run()
    assert again.ran == 1 and again.study != first.study
    assert [n for n in again.notes if "changed since" in n] == [
        f"the environment (versions, device, env vars) changed since study {first.study} was measured: "
        f"this run measures study {again.study}"]
    assert "--verbose=35" in pool.results[1].plan.env["NEURON_CC_FLAGS"]


def test_a_result_that_was_pruned_does_not_answer_a_run_that_does_not_prune(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(EAGER)
    pool = InProcessPool(None)

    def run(study: str, prune: bool):
        return tune_on(pool, SCRIPTS / "tiny_train.py", "--steps", "300", trials=1, target="inductor", space="space.yaml",
                    seed=0, study=study, prune=prune, protocol=SHORT)

    assert run("pruning", True).ran == 1
    # As a run that pruned it would have left it: stopped early, below the best of its study.
    (entry,) = (Path(os.environ["XDG_CACHE_HOME"]) / "autotune" / "results").glob("*/*.json")
    kept = json.loads(entry.read_text())
    kept["measurement"]["pruned"] = True
    entry.write_text(json.dumps(kept))
    assert run("pruning-again", True).reused == 1, "a run that prunes takes it"
    whole = run("whole", False)
    assert (whole.ran, whole.reused) == (1, 0)
    assert not json.loads(entry.read_text())["measurement"]["pruned"], "the whole measurement replaces it"


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the driver's loop beats itself
def test_a_measurement_is_remembered_when_another_driver_took_its_trial_for_lost(tmp_path) -> None:
    import optuna

    from autotune.cache import open_cache
    from autotune.objectives import objective
    from autotune.records import Measurement, TrialPlan, TrialResult
    from autotune.study.options import StudyOptions, StudyProgress
    from autotune.study.tell import TrialRecorder
    from autotune.storage.optuna_storage import open_storage
    from autotune.storage.optuna_versions import finished_already
    from autotune.storage.attrs import write

    storage = open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    cache = open_cache(tmp_path / "cache")
    recorder = TrialRecorder(study, StudyOptions.checked(script=SCRIPTS / "tiny_train.py"), cache,
                             StudyProgress("s", "inductor", 1), {}, [], on_told=lambda: None,
                             objectives=[objective("throughput")], constraints=[], usd_per_sample_second=None)
    trial = study.ask()
    write(trial, result_key="k")
    # What another driver does to a trial whose heartbeats stopped reaching the database.
    storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    result = TrialResult(status="ok", plan=TrialPlan(target="inductor", params={}),
                         measurement=Measurement(throughput=120.0, ci95_low=118.0, ci95_high=122.0,
                                                 step_time_median=0.01, step_time_p90=0.012, samples_per_step=1,
                                                 steps_measured=100, windows=5, converged=True, warmup_steps=3,
                                                 warmup_seconds=1.0))
    with pytest.raises(RuntimeError) as refused:
        recorder.tell(trial, result, None)
    assert finished_already(refused.value), refused.value
    assert cache.get_result("k").measurement.throughput == 120.0


def test_two_projects_train_py_on_one_postgresql_database_never_share_a_study(postgres_url, tmp_path,
                                                                              monkeypatch) -> None:
    import optuna

    from autotune.storage.optuna_storage import rdb_storage

    (tmp_path / "space.yaml").write_text(EAGER)
    pool = InProcessPool(None)
    studies = []
    for project, width in (("vision", "128"), ("speech", "96")):
        folder = tmp_path / project
        folder.mkdir()
        script = folder / "train.py"
        script.write_text((SCRIPTS / "tiny_train.py").read_text().replace("128", width))
        monkeypatch.chdir(folder)
        result = tune_on(pool, script, "--steps", "300", trials=1, target="inductor", space=str(tmp_path / "space.yaml"),
                      seed=0, storage=postgres_url, protocol=SHORT)
        assert (result.ran, result.reused) == (1, 0), project
        studies.append(result.study)
    assert studies[0] == "train-inductor" != studies[1]
    summaries = optuna.get_all_study_summaries(rdb_storage(postgres_url), include_best_trial=False)
    stored = {s.study_name: s.user_attrs["script"] for s in summaries}
    assert stored == {studies[0]: str(tmp_path / "vision" / "train.py"),
                      studies[1]: str(tmp_path / "speech" / "train.py")}
