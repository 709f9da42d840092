"""The map and the contracts say the same: docs/architecture.md's layer tables are the import-linter
contracts of pyproject.toml, the contracts hold, and the one that forbids import cycles sees an
import made inside a function. No class or module is so long, and no package so wide, that it must
own more than one thing."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS: list[dict[str, Any]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
#: The most lines a class of ``autotune/`` may span: one longer owns more than one thing, and a part
#: of it belongs in a class or module of its own.
MOST_CLASS_LINES = 250
#: The classes still longer, each held to the length it has.
LONGER: dict[str, int] = {}
#: The most lines a module may have, and the most modules a package may hold: a longer one does two
#: jobs, a wider one has not yet found its sub-concepts.
MOST_MODULE_LINES = 450
MOST_PACKAGE_MODULES = 15
#: import-linter's command, beside this Python's (what .ci/layers runs).
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading``, each cell stripped."""
    section = ARCHITECTURE.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _module(name: str, package: str = "autotune") -> str:
    """``cli/`` -> ``autotune.cli``; ``trial.py`` -> ``autotune.trial``."""
    return f"{package}.{name.removesuffix('/').removesuffix('.py')}"


def _parts(cell: str, package: str = "autotune") -> set[str]:
    return {_module(name, package) for name in re.findall(r"`([^`]+)`", cell)}


def _contract_layers(layers: list[str], package: str = "autotune") -> list[set[str]]:
    """A layers contract's layers, each the set of its modules (an optional one's parentheses off)."""
    out = []
    for layer in layers:
        names = (name.strip().strip("()") for name in re.split(r"[|:]", layer))
        out.append({name if name.startswith(f"{package}.") else f"{package}.{name}" for name in names})
    return out


def test_the_layer_table_is_the_layers_contract() -> None:
    [contract] = [c for c in CONTRACTS if c["type"] == "layers" and "containers" not in c]
    table = [_parts(part) for _, part, _ in _table("The parts, top to bottom")]
    assert table == _contract_layers(contract["layers"])


def test_the_layers_inside_a_package_are_their_contracts() -> None:
    inside = {c["containers"][0]: c["layers"] for c in CONTRACTS if c["type"] == "layers" and "containers" in c}
    rows = _table("Inside a package")
    assert {_module(re.findall(r"`([^`]+)`", package)[0]) for package, _ in rows} == set(inside)
    for package, modules in rows:
        container = _module(re.findall(r"`([^`]+)`", package)[0])
        table = [_parts(layer, container) for layer in modules.split(" > ")]
        assert table == _contract_layers(inside[container], container), container


def test_the_contracts_hold() -> None:
    done = subprocess.run([LINT_IMPORTS, "--config", str(ROOT / "pyproject.toml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout[-4000:]


@pytest.mark.parametrize("inside_a_function", [True, False])
def test_a_cycle_closed_inside_a_function_breaks_the_cycle_contract(tmp_path: Path, inside_a_function: bool) -> None:
    """The cycle contract of pyproject.toml, on a package whose format module imports its recorder
    back inside a function (as landscapes/ once did): broken, and kept without that import."""
    [contract] = [c for c in CONTRACTS if c["type"] == "acyclic_siblings"]
    package = tmp_path / "probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "recorder.py").write_text("from probe.fileformat import read\n")
    back = "    from probe.recorder import record\n" if inside_a_function else ""
    (package / "fileformat.py").write_text(f"def read():\n{back}    return None\n")
    (tmp_path / "contracts.toml").write_text(
        '[tool.importlinter]\nroot_package = "probe"\n\n[[tool.importlinter.contracts]]\n'
        f'name = "probe"\ntype = "{contract["type"]}"\nancestors = ["probe"]\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([LINT_IMPORTS, "--config", "contracts.toml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    if inside_a_function:
        assert done.returncode == 1 and "No cycles are allowed in probe" in done.stdout, done.stdout
    else:
        assert done.returncode == 0 and "1 kept, 0 broken" in done.stdout, done.stdout


def long_classes(root: Path) -> dict[str, int]:
    """Each class under ``root / "autotune"`` longer than :data:`MOST_CLASS_LINES`, as
    ``path Name`` (the path from ``root``), with the lines it spans."""
    found = {}
    for path in sorted((root / "autotune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MOST_CLASS_LINES:
                    found[f"{path.relative_to(root)} {node.name}"] = lines
    return found


def test_no_class_is_over_the_most_lines_a_class_may_span() -> None:
    found = long_classes(ROOT)
    assert {name: lines for name, lines in found.items() if lines > LONGER.get(name, MOST_CLASS_LINES)} == {}
    assert set(LONGER) <= set(found), "a class split below the limit leaves LONGER"


def test_no_module_is_over_its_lines_and_no_package_over_its_modules() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "autotune").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MOST_MODULE_LINES}
    assert not long, f"modules over {MOST_MODULE_LINES} lines: {long}"
    wide = {str(d.relative_to(ROOT)): n for d in (ROOT / "autotune").rglob("*") if d.is_dir()
            if (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MOST_PACKAGE_MODULES}
    assert not wide, f"packages over {MOST_PACKAGE_MODULES} modules: {wide}"
