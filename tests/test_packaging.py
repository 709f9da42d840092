"""What ``pip install`` puts into site-packages: the ``autotune`` package and nothing else at the top."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
def test_the_wheel_installs_workers_and_search_spaces_under_autotune(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("autotune-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"autotune", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "autotune/workers/harness.py" in names
    assert {"autotune/search_spaces/xla.yaml", "autotune/search_spaces/inductor.yaml"} <= set(names)
    assert "autotune/instances.yaml" in names, "the instance catalogue (pricing.py) ships with the package"
