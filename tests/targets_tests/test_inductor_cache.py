"""Where a trial's compiled inductor kernels go: the cache root's ``inductor/`` folder, or the
caller's own folder named by ``AUTOTUNE_INDUCTOR_CACHE``."""

from __future__ import annotations

from pathlib import Path

from autotune.trial import prepare_trial


def test_the_inductor_cache_is_the_cache_roots_unless_the_caller_names_a_folder_of_its_own(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    root = tmp_path / "root"
    own = prepare_trial(script, target="inductor", sets={"mode": "default"}, cache_root=str(root), base_env={})
    assert own.plan.env["TORCHINDUCTOR_CACHE_DIR"] == f"{root}/inductor"

    monkeypatch.chdir(tmp_path)
    shared = prepare_trial(script, target="inductor", sets={"mode": "default"}, cache_root=str(root),
                           base_env={"AUTOTUNE_INDUCTOR_CACHE": "kernels"})
    # Made absolute where the driver stands: a trial runs in a folder of its own.
    assert shared.plan.env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "kernels")
