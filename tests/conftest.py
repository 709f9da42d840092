"""Fixtures shared by the whole suite.

One fixture per concern, so that adding one (a session-wide Ray, a database) is adding a function
here and nothing else. Fixtures that only one package's tests use live in that package's
``conftest.py`` (``workers_tests/conftest.py`` runs trials).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def trial_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The environment every trial process of the session inherits (the launcher copies ours).

    - ``TORCHINDUCTOR_CACHE_DIR``: one inductor cache for the session. A cold compile costs about
      20 s here; trials that compile the same graph share it instead of paying again.
    - ``PJRT_DEVICE=CPU``: torch-xla runs on the CPU.
    - ``OMP_NUM_THREADS=1``: on a 2-core runner that is busy with other work, every OpenMP
      parallel region waits for a time slice for its second thread; a 0.1 ms step of a tiny model
      then takes 20 ms, and trials measure the machine's load instead of the configuration.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor-cache")))
        mp.setenv("PJRT_DEVICE", "CPU")
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="session")
def write_script(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """``write_script(name, source)``: a script in a fresh directory, its source dedented."""

    def write(name: str, source: str) -> Path:
        path = tmp_path_factory.mktemp("script") / name
        path.write_text(textwrap.dedent(source).lstrip())
        return path

    return write
