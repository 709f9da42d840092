"""What ``pip install`` puts into site-packages: the ``autotune`` package and nothing else at the top,
under a distribution name of its own, with its licence; what the install hints name."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from autotune.errors import DISTRIBUTION, install_hint

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _declared() -> tuple[list[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config["packages"], config.get("package-dir", {})


def test_every_package_folder_is_declared() -> None:
    """The package list is written out (``package-dir`` maps folders into the namespace), so a new
    sub-package that is not added to it would be left out of a wheel."""
    packages, package_dir = _declared()
    folders = {pkg: ROOT / package_dir.get(pkg, pkg.replace(".", "/")) for pkg in packages}
    for pkg, folder in folders.items():
        assert (folder / "__init__.py").is_file(), f"{pkg}: {folder} has no __init__.py"
    found = {p.parent for top in set(folders.values()) for p in top.rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found == set(folders.values()), sorted(str(p) for p in found ^ set(folders.values()))


@pytest.mark.slow
def test_the_wheel_holds_the_package_alone_with_its_data_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("torch_autotune-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"autotune", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "autotune/harness/trial_process.py" in names
    assert {"autotune/search_spaces/xla.yaml", "autotune/search_spaces/inductor.yaml"} <= set(names)
    assert "autotune/machine/instances.yaml" in names, "the instance catalogue (machine/pricing.py) ships with the package"
    assert "autotune/harness/hook/sitecustomize.py" in names, "the hook every trial and applied job puts first on PYTHONPATH"
    assert "autotune/schemas/best.schema.json" in names, "best.json's JSON Schema ships with the package"
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    fields = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "\nName: torch-autotune\n" in fields and "\nLicense-Expression: Apache-2.0\n" in fields, fields[:800]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the licence text ships in the wheel"


def test_the_distribution_has_a_name_of_its_own() -> None:
    """"autotune" on PyPI is an unrelated project: an install hint with that name installs it."""
    assert PROJECT["name"] == DISTRIBUTION != "autotune"
    assert install_hint("report") == f'pip install "{DISTRIBUTION}[report]"'
    assert PROJECT["scripts"] == {"autotune": "autotune.cli:main"}, "the command keeps its name"


def test_no_install_hint_names_another_project() -> None:
    """Every ``pip install`` of an extra, in the code and in the docs, names this distribution."""
    hint = re.compile(r"""pip install (?:-e )?["'`]?([A-Za-z][A-Za-z0-9_-]*)\[""")
    files = [*ROOT.glob("autotune/**/*.py"), *ROOT.glob("bench/*.py"),
             ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
    wrong = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in files for m in hint.finditer(path.read_text())
             if m.group(1) != DISTRIBUTION]
    assert not wrong, wrong


def test_licence_and_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert "Programming Language :: Python :: 3" in PROJECT["classifiers"]


def test_the_web_stack_is_the_serve_extra() -> None:
    """Only the daemon and its clients use fastapi, uvicorn and httpx; the tests install them."""
    core = {Requirement(r).name for r in PROJECT["dependencies"]}
    serve = {Requirement(r).name for r in PROJECT["optional-dependencies"]["serve"]}
    assert serve == {"fastapi", "uvicorn", "httpx"} and not serve & core
    (own,) = [Requirement(r) for r in PROJECT["optional-dependencies"]["test"] if Requirement(r).name == DISTRIBUTION]
    assert {"cpu", "serve"} <= own.extras


def test_every_dependency_has_a_lower_bound() -> None:
    """.ci/run installs each at its lower bound (uv's lowest-direct resolution): a dependency with no
    bound would be tested at whatever release is oldest on PyPI."""
    for text in PROJECT["dependencies"]:
        req = Requirement(text)
        assert any(spec.operator in (">=", "==") for spec in req.specifier), text
    ci = (ROOT / ".ci" / "run").read_text()
    assert '--resolution lowest-direct -e ".[test]"' in ci and '-m "not slow"' in ci


def test_provenance_names_the_installed_version() -> None:
    """Each result records the autotune it was measured with: read by the distribution's name."""
    from importlib.metadata import version

    from autotune.provenance import provenance
    from autotune.targets import resolve_target

    script = ROOT / "tests" / "scripts" / "tiny_train.py"
    assert provenance(resolve_target("inductor", script), script, [])["autotune"] == version(DISTRIBUTION)
