"""docs/reference/cli.md is what the command line says of itself: written again here, it must be
the page that is committed, and it must hold every command with its options."""

from __future__ import annotations

from pathlib import Path

import typer

from autotune.cli import app
from autotune.cli.reference import PAGE, main, page
from autotune.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_current() -> None:
    assert (ROOT / PAGE).read_text() == page(), "docs/reference/cli.md is stale: run python -m autotune.cli.reference"


def test_every_command_and_option_is_on_the_page() -> None:
    text = page()
    root = typer.main.get_command(app)
    groups = [(["autotune"], root)]
    while groups:
        path, group = groups.pop()
        for name, command in getattr(group, "commands", {}).items():
            if command.hidden:  # autotune landscape: the benchmarks' tool, out of --help too
                continue
            assert f"## `{' '.join([*path, name])}`" in text, name
            for option in command.params:
                if option.param_type_name == "option" and not option.hidden:
                    assert f"`{option.opts[0]}`" in text, (name, option.opts)
            groups.append(([*path, name], command))
    cores = RunConfig.model_fields["cores_per_trial"].default
    assert f"- `--cores-per-trial` `INTEGER` (default `{cores}`): NeuronCores each trial holds." in text


def test_check_says_when_the_page_is_stale(tmp_path: Path) -> None:
    assert main([str(tmp_path), "--check"]) == 1
    assert main([str(tmp_path)]) == 0 and main([str(tmp_path), "--check"]) == 0
    (tmp_path / PAGE).write_text(page().replace("NeuronCores each trial holds.", "GPUs each trial holds."))
    assert main([str(tmp_path), "--check"]) == 1
