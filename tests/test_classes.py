"""Every attribute of an object exists from its constructor on: no method of a class in
``autotune/`` creates one that ``__init__`` (or a method it calls) did not.

A reader then finds all of an object's state in one place, and no attribute is missing on a path
that skipped the method creating it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*(ROOT / "autotune").rglob("*.py")]
CONSTRUCTORS = ("__init__", "__post_init__", "model_post_init")


def _self_assignments(fn: ast.AST) -> dict[str, int]:
    """``self.NAME = ...`` (also annotated, augmented and in tuples) in ``fn``: name -> line."""
    names: dict[str, int] = {}
    for node in ast.walk(fn):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.setdefault(t.attr, node.lineno)
    return names


def _self_calls(fn: ast.AST) -> set[str]:
    return {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def findings(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        declared = {t.id for n in cls.body for t in (n.targets if isinstance(n, ast.Assign) else
                                                     [n.target] if isinstance(n, ast.AnnAssign) else [])
                    if isinstance(t, ast.Name)}
        constructing = [name for name in CONSTRUCTORS if name in methods]
        # What the constructor calls on self is part of it (a reset that also runs later).
        constructing += [name for c in list(constructing) for name in _self_calls(methods[c]) if name in methods]
        for name in constructing:
            declared |= set(_self_assignments(methods[name]))
        for name, method in methods.items():
            if name in constructing:
                continue
            found += [f"{path.relative_to(root)}:{line} {cls.name}.{name} creates self.{attr}"
                      for attr, line in _self_assignments(method).items() if attr not in declared]
    return found


def test_no_method_creates_an_attribute() -> None:
    assert len(SOURCES) > 60
    assert [f for path in SOURCES for f in findings(path)] == []


def test_the_check_sees_an_attribute_created_late(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("class A:\n    def __init__(self):\n        self.a = 1\n        self._reset()\n\n"
                     "    def _reset(self):\n        self.b = 2\n\n"
                     "    def fit(self):\n        self.a, self.b = 3, 4\n        self.c = 5\n")
    assert [f.split(" ", 1)[1] for f in findings(probe, tmp_path)] == ["A.fit creates self.c"]
