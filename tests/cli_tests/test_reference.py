"""The reference pages are what the code says of itself: written again here, each must be the file
that is committed. docs/reference/cli.md holds every command with its options, and
docs/reference/outputs.md every field of the models that write the output files, each described."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel, Field

from autotune.cli import app, outputs_reference
from autotune.cli.reference import PAGE, files, main, page, schema
from autotune.config import RunConfig
from autotune.daemon.ensure import EnsureResult
from autotune.results.outputs import SCHEMA_FILE

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(files()), ids=str)
def test_the_committed_files_are_current(name: Path) -> None:
    assert (ROOT / name).read_text() == files()[name](), f"{name} is stale: run python -m autotune.cli.reference"


def test_the_package_ships_the_schema_of_best_json() -> None:
    assert resources.files("autotune").joinpath(SCHEMA_FILE).read_text() == schema()


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


def test_a_field_without_a_description_is_refused() -> None:
    class Described(BaseModel):
        figure: float = Field(description="Samples/s.")

    class Nested(BaseModel):
        inner: Described = Field(description="A figure.")
        bare: int = 0

    with pytest.raises(ValueError, match="Nested.bare has no description"):
        outputs_reference._tables(Nested.model_json_schema(mode="serialization"))


def test_ensure_json_is_described_key_for_key() -> None:
    assert list(outputs_reference.ENSURE_KEYS) == list(EnsureResult.model_fields)


def test_check_says_when_a_file_is_stale(tmp_path: Path) -> None:
    assert main([str(tmp_path), "--check"]) == 1
    assert main([str(tmp_path)]) == 0 and main([str(tmp_path), "--check"]) == 0
    assert (tmp_path / PAGE).read_text() == page()
    outputs = tmp_path / outputs_reference.PAGE
    outputs.write_text(outputs.read_text().replace("Samples/s this run measured.", "Samples this run measured."))
    assert main([str(tmp_path), "--check"]) == 1
