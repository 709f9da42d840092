"""Fixtures shared by the whole suite.

One fixture per concern, so that adding one (a session-wide Ray, a database) is adding a function
here and nothing else. Fixtures that only one package's tests use live in that package's
``conftest.py`` (``workers_tests/conftest.py`` runs trials).
"""

from __future__ import annotations

import itertools
import os
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune.records import MeasurementProtocol, TrialResult
from autotune.trial import prepare_trial
from autotune.workers.launcher import TrialLimits, run_trial

from bench.lib.postgres import ThrowawayPostgres, postgres_missing

#: Published scripts kept as they are (two are named test_*.py and parse sys.argv when imported):
#: data for tests/corpus_tests/, never collected themselves.
collect_ignore = ["corpus"]


@pytest.fixture(scope="session", autouse=True)
def trial_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The environment every trial process of the session inherits (the launcher copies ours).

    - ``TORCHINDUCTOR_CACHE_DIR`` and ``AUTOTUNE_INDUCTOR_CACHE``: one inductor cache for the run,
      shared by pytest-xdist's processes too (the folder above each one's base temp), and by the
      studies' trials, whose cache roots are each test's own (the second variable; the tests of the
      cache root's own ``inductor/`` folder remove it). A cold compile costs about 20 s here;
      trials that compile the same graph share it instead of paying again, in either process
      (a tiny MLP's three graphs: 43 s cold, 29 s from the cache). Inductor's cache is made for
      several processes at once: by default every process of a user shares /tmp/torchinductor_$USER.
    - ``PJRT_DEVICE=CPU``: torch-xla runs on the CPU.
    - ``OMP_NUM_THREADS=1``: on a 2-core runner that is busy with other work, every OpenMP
      parallel region waits for a time slice for its second thread; a 0.1 ms step of a tiny model
      then takes 20 ms, and trials measure the machine's load instead of the configuration.
    """
    with pytest.MonkeyPatch.context() as mp:
        base = tmp_path_factory.getbasetemp()
        inductor_cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "inductor-cache"
        inductor_cache.mkdir(exist_ok=True)
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache))
        mp.setenv("AUTOTUNE_INDUCTOR_CACHE", str(inductor_cache))
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


#: Where a system Chromium (or Chrome) may be; Playwright's own browser download is not possible here.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium driven by Playwright: the system's browser, found on PATH. Skipped, with
    the reason, only when this machine has none (.ci/run installs it)."""
    import shutil

    executable = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if executable is None:
        pytest.skip(f"no Chromium on this machine (none of {', '.join(BROWSERS)} on PATH): apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


@dataclass
class OpenedPage:
    """A page opened in :func:`browser`, with every JavaScript error it raised or logged and every
    request it made beyond the page's own origin."""

    page: Any
    errors: list[str]
    outside_requests: list[str]


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., OpenedPage]]:
    """``open_page(url, offline=False, headers=None)``: the page loaded in a fresh browser context,
    its console errors and uncaught exceptions collected; ``offline`` blocks every request but the
    page itself (a report must open without a network)."""
    contexts: list[Any] = []

    def open_(url: str, *, offline: bool = False, headers: dict[str, str] | None = None) -> OpenedPage:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=headers or {},
                                      offline=offline)
        contexts.append(context)
        page = context.new_page()
        opened = OpenedPage(page=page, errors=[], outside_requests=[])
        page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: opened.errors.append(str(e)))
        if offline:
            def route(r: Any) -> None:
                if r.request.url == url:
                    r.continue_()
                else:
                    opened.outside_requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
        page.goto(url, wait_until="load")
        return opened

    yield open_
    for c in contexts:
        c.close()
# -- a throw-away PostgreSQL server ------------------------------------------------------------

@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server for the session (:class:`bench.lib.postgres.ThrowawayPostgres`), removed
    at the end; a test may stop and start it again."""
    missing = postgres_missing()
    if missing:
        pytest.skip(missing)
    server = ThrowawayPostgres()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def postgres_server(postgres: ThrowawayPostgres) -> str:
    """The session's server's URL without a database name."""
    return postgres.url


@pytest.fixture
def postgres_url(postgres: ThrowawayPostgres) -> str:
    """A new, empty database on the session's server: ``postgresql://postgres:PASSWORD@127.0.0.1:PORT/tN``."""
    return postgres.create_database(f"t{next(_databases)}")


_databases = itertools.count()


# -- Ray, the cache root and single trials ----------------------------------------------------

@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole session (it takes about 6 s to start here).

    It declares 8 NeuronCores: Ray hands them out and sets NEURON_RT_VISIBLE_CORES on a machine
    without a Neuron device, which is what makes fleet placement testable here. And 2 compile
    workers' places (``--compile-workers``).
    """
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), resources={"neuron_cores": 8, "compile_slots": 2}, include_dashboard=False,
                 log_to_driver=False, logging_level="ERROR")
    yield ray


@pytest.fixture(autouse=True)
def own_cache_root(tmp_path_factory, monkeypatch):
    """Each test its own cache root: results remembered by one test must not answer another's. Not
    under ``tmp_path``, which tests read as the folder a command left what it wrote in."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


#: Measures for at most 2 s after warm-up: enough for a figure, short enough for a test suite.
QUICK = MeasurementProtocol(max_measure_seconds=2.0, max_measure_steps=400)

RunScript = Callable[..., TrialResult]


@pytest.fixture(scope="session")
def run_script(tmp_path_factory: pytest.TempPathFactory) -> RunScript:
    """``run_script(script, target=..., sets=..., ...)``: plan and run one trial, as ``autotune trial`` does.

    ``base_env`` replaces the environment the trial process inherits (and the plan is made
    against it), which is how a test hands a trial a broken ``XLA_FLAGS``.
    """

    def run(script: str | Path, *, target: str = "inductor", sets: dict[str, Any] | None = None,
            args: list[str] | None = None, protocol: MeasurementProtocol = QUICK,
            timeout_s: float = 180.0, memory_bytes: int | None = None,
            base_env: dict[str, str] | None = None, nproc_per_node: int = 1,
            rendezvous_s: float | None = None) -> TrialResult:
        prepared = prepare_trial(script, target=target, sets=sets, base_env=base_env, nproc_per_node=nproc_per_node)
        return run_trial(prepared.plan, prepared.script, args, trial_dir=tmp_path_factory.mktemp("trial"),
                         limits=TrialLimits(timeout_s=timeout_s, memory_bytes=memory_bytes,
                                            rendezvous_s=rendezvous_s),
                         protocol=protocol, base_env=base_env)

    return run

