"""What a study's results rest on: the script, its arguments and the environment they were measured
in, the caller's env vars that reach each trial, and a measurement kept when its trial was taken
for lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autotune import tune
from autotune.records import MeasurementProtocol

from .test_script_flags_study import InProcessPool

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
        return tune(script, "--steps", "300", trials=1, target="inductor", space="space.yaml", seed=0,
                    pool_factory=lambda study: pool, protocol=SHORT)

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
    theirs = tune(other, "--steps", "300", trials=1, target="inductor", space="space.yaml", seed=0,
                  pool_factory=lambda study: pool, protocol=SHORT)
    assert theirs.ran == 1 and theirs.study not in (first.study, edited.study)

    # Other arguments are another measurement as well.
    longer = tune(script, "--steps", "350", trials=1, target="inductor", space="space.yaml", seed=0,
                  pool_factory=lambda study: pool, protocol=SHORT)
    assert longer.ran == 1 and any("and its arguments changed" in n for n in longer.notes), longer.notes
