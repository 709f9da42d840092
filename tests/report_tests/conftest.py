"""A study to report on: the README's main job (the ViT example on XLA:CPU), replayed from its
recorded landscape through the real study loop and the real Optuna storage in a few seconds, with
its real pruned trials and crashes.

Where the main job itself has just run (``.ci/run`` sets ``AUTOTUNE_MAIN_JOB_DIR`` to the folder it
ran in), :func:`main_job_run` is that study, as the README's command left it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN_JOB = ROOT / "landscapes" / "xla-vit.jsonl"
STUDY = "vit_xla_train-xla"


# tryfirst: pytest-xdist reads the group in its own hook, which otherwise runs first where this
# folder is named on the command line (its conftest is then loaded before xdist's worker).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One process runs every report test when the suite runs in several (pytest-xdist): the main
    job's study is replayed once (10 to 20 s here), not once in each process."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("report"))


@dataclass(frozen=True)
class StoredStudy:
    home: Path
    storage: str
    name: str

    def cli(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=self.home,
                              capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


@pytest.fixture(scope="session")
def main_job_study(tmp_path_factory: pytest.TempPathFactory) -> StoredStudy:
    from autotune.landscapes.replay import replay_study

    home = tmp_path_factory.mktemp("main-job")
    replay_study(MAIN_JOB, trials=16, workdir=home, seed=3)
    return StoredStudy(home=home, storage=f"sqlite:///{home / 'replay.db'}", name=STUDY)


@pytest.fixture(scope="session")
def main_job_run() -> StoredStudy | None:
    """The study of the README's main job run for real in ``AUTOTUNE_MAIN_JOB_DIR``; None elsewhere."""
    home = os.environ.get("AUTOTUNE_MAIN_JOB_DIR")
    if not home:
        return None
    db = Path(home) / ".autotune" / "autotune.db"
    assert db.is_file(), f"AUTOTUNE_MAIN_JOB_DIR={home}: the main job left no {db}"
    return StoredStudy(home=Path(home), storage=f"sqlite:///{db}", name=STUDY)
