"""One ask-tell loop: the study's. Benchmarks, replays and tests drive :class:`autotune.study.study.Study`
itself; a study kept in memory writes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import optuna

from autotune.landscapes.landscape import load_landscape
from autotune.search.configurations import starting_points
from bench.lib.simulate import simulate

REPO = Path(__file__).resolve().parents[2]


def test_optuna_is_asked_for_trials_in_one_module() -> None:
    asking = sorted(str(path.relative_to(REPO)) for folder in ("autotune", "bench")
                    for path in (REPO / folder).rglob("*.py") if re.search(r"\.ask\(", path.read_text()))
    assert asking == ["autotune/study/loop.py"]


def test_a_study_kept_in_memory_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    land = load_landscape(REPO / "landscapes" / "inductor-vit.jsonl")
    trace = simulate(land, optuna.samplers.RandomSampler(seed=0), starting_points=starting_points(land.space),
                     max_trials=6)
    assert len(trace.steps) == 6
    assert list(tmp_path.iterdir()) == []
