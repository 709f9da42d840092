"""Targets own their knowledge: nothing outside ``autotune/targets/`` branches on a target's name
or spells one of a target's compiler flags, env vars or cache folders."""

from __future__ import annotations

import ast
from pathlib import Path

from autotune.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = [p for p in (ROOT / "autotune").rglob("*.py") if (ROOT / "autotune" / "targets") not in p.parents]

#: Strings that only a target may write, as each target lists them (``Target.spellings``).
SPELLINGS = {spelling for cls in TARGETS.values() for spelling in cls.spellings}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.add(id(body[0].value))
    return ids


def _strings(node: ast.AST) -> list[str]:
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    where = path.relative_to(ROOT)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            if any(isinstance(s, ast.Attribute) and s.attr == "backend" for s in sides):
                continue  # torch.compile's backend ("inductor", "openxla"), as the plan says
            for side in sides:
                found += [f"{where}:{node.lineno} compares with the target name {s!r}"
                          for s in _strings(side) if s in TARGETS]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            hits = [s for s in SPELLINGS if s in node.value.split() or node.value.startswith(f"{s}=")]
            found += [f"{where}:{node.lineno} spells {s!r}" for s in hits]
    return found


def test_no_code_outside_targets_branches_on_a_target_or_spells_its_flags() -> None:
    assert len(OUTSIDE) > 40
    # What each compiler target writes into its env var: its flags, and the variable itself.
    assert {"NEURON_CC_FLAGS", "--auto-cast", "-lnc", "--retry_failed_compilation",
            "--xla_backend_optimization_level", "--xla_cpu_use_thunk_runtime"} <= SPELLINGS
    findings = [f for path in OUTSIDE for f in _findings(path)]
    assert findings == []


def test_the_check_sees_a_branch_and_a_flag(tmp_path: Path) -> None:
    probe = ROOT / "autotune" / "_probe_for_test.py"
    probe.write_text('def f(t):\n    """xla NEURON_CC_FLAGS in a docstring is fine."""\n'
                     '    if t.name == "neuron":\n        return "--retry_failed_compilation"\n')
    try:
        assert _findings(probe) == [
            "autotune/_probe_for_test.py:3 compares with the target name 'neuron'",
            "autotune/_probe_for_test.py:4 spells '--retry_failed_compilation'",
        ]
    finally:
        probe.unlink()


def test_a_targets_error_strings_live_with_the_target() -> None:
    """The strings a compiler or runtime prints when it fails are its target's, not measurement's."""
    owned = {fp.pattern.pattern: name for name, cls in TARGETS.items() for fp in cls.failure_patterns}
    assert {name for name in owned.values()} == set(TARGETS), "every target knows how its compiler fails"
    found = [f"{path.relative_to(ROOT)} holds {name}'s {regex!r}" for path in OUTSIDE
             for regex, name in owned.items() if regex in path.read_text()]
    assert found == []
