"""autotune reaches Optuna through its public API only: no name of Optuna's that starts with ``_``
(a private module, class, method or attribute) is reached from ``autotune/``, so that a release of
Optuna that renames one breaks nothing, and the oldest release the package declares runs it."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _optuna_private_names() -> set[str]:
    """The private names that Optuna's study, trial and storage objects hold (their attributes and
    methods), as this Optuna has them."""
    study = optuna.create_study()
    trial = study.ask()
    study.tell(trial, 1.0)
    objects: list[object] = [study, trial, study.trials[0], optuna.storages.RDBStorage("sqlite://")]
    objects += [cls for module in (optuna.storages, optuna.study, optuna.trial)
                for cls in vars(module).values() if isinstance(cls, type)]
    return {name for o in objects for name in [*dir(o), *getattr(o, "__dict__", {})] if _private(name)}


NAMES = _optuna_private_names()


def _rooted_at_optuna(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "optuna"


def private_uses(source: str) -> list[str]:
    """Where ``source`` reaches a private name of Optuna's: an import from a private module or of a
    private name, ``optuna.<...>._x``, ``super()._x``, ``self._x`` in a class built on one of
    Optuna's that the class does not define, ``<anything else>._x`` for a private name Optuna's
    objects hold, or such a name of a storage's as a string (``getattr(storage, "_x")``)."""
    tree = ast.parse(source)
    from_optuna = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").split(".")[0] == "optuna" for alias in node.names}
    #: In each class built on one of Optuna's, the ``self._x`` it reads that it does not define
    #: (what it inherits from Optuna's class).
    inherited: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id in from_optuna) or _rooted_at_optuna(b) for b in node.bases):
            inside = list(ast.walk(node))
            own = {n.name for n in inside if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | \
                {n.attr for n in inside if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
            inherited.update(n for n in inside if isinstance(n, ast.Attribute) and n.attr not in own)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            if any(_private(part) for part in (node.module or "").split(".")) or \
                    any(_private(alias.name) for alias in node.names):
                found.append(f"{line}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "optuna" and any(_private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            own = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
            parents = isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) \
                and receiver.func.id == "super"
            if _rooted_at_optuna(receiver) or parents or (own and node in inherited) \
                    or (not own and node.attr in NAMES):
                found.append(f"{line}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES \
                and callable(getattr(optuna.storages.RDBStorage, node.value, None)):
            found.append(f"{line}: {node.value!r}")
    return found


def test_autotune_reaches_no_private_name_of_optunas() -> None:
    found = {str(path.relative_to(ROOT)): uses for path in sorted((ROOT / "autotune").rglob("*.py"))
             if (uses := private_uses(path.read_text()))}
    assert not found, f"Optuna's private names, reached from autotune/: {found}"


@pytest.mark.parametrize("source", [
    "from optuna.storages import _CachedStorage",
    "from optuna.study._frozen import FrozenStudy",
    "import optuna\noptuna.storages._CachedStorage",
    "def f(study):\n    return study._storage, study._study_id",
    "def f(trial):\n    return trial._trial_id",
    "from optuna.storages import RDBStorage\nclass S(RDBStorage):\n    def f(self):\n        return super()._get_stale_trial_ids(1)",
    "from optuna.storages import RDBStorage\nclass S(RDBStorage):\n    def f(self):\n        return self._backend",
    "from optuna.storages import RDBStorage\ngetattr(RDBStorage, '_get_trials')",
])
def test_each_way_of_reaching_one_is_found(source: str) -> None:
    assert private_uses(source), source


def test_autotunes_own_private_names_are_its_own() -> None:
    assert not private_uses("class Beats:\n    def __init__(self, storage):\n        self._storage = storage\n"
                            "    def f(self):\n        return self._storage, self._lock")
