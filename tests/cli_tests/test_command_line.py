"""The command line as a new user meets it: --version, --help (choices, panels, env vars), the
option names, and the extras a command needs."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from autotune.cli.options import CHOICES, PANELS
from autotune.config import RunConfig
from autotune.errors import DISTRIBUTION

TINY = str(Path(__file__).resolve().parents[1] / "scripts" / "tiny_train.py")


def autotune(*args: str, cwd: Path, env: dict[str, str] | None = None,
             hide: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``autotune ARGS`` in a wide terminal (help lines unwrapped); ``hide`` makes packages unimportable,
    as on a machine without them."""
    code = "".join(f"sys.modules[{name!r}] = None; " for name in hide)
    run = f"import sys; {code}from autotune.cli import main; sys.argv = ['autotune', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", run, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


def test_version(tmp_path: Path) -> None:
    done = autotune("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == f"autotune {version(DISTRIBUTION)}\n", done.stdout + done.stderr


def test_help_shows_choices_panels_and_env_vars(tmp_path: Path) -> None:
    text = autotune("run", "--help", cwd=tmp_path).stdout
    for shown in ("[auto|neuron|xla|inductor]", "[autotune|tpe|random|qmc]", "[maximize|minimize]",
                  "[throughput|cost|latency_p50|latency_p90|latency_p99|peak_memory|METRIC]"):
        assert shown in text, shown
    for panel in ("Search", "Placement", "Storage", "Output", "Objective and budget"):
        assert f"─ {panel} ─" in text, panel
    assert "env var: AUTOTUNE_STORAGE" in text and "env var: RAY_ADDRESS" in text
    for command in ("best", "serve"):
        assert "env var: AUTOTUNE_STORAGE" in autotune(command, "--help", cwd=tmp_path).stdout, command


def test_every_option_of_a_run_has_a_panel_and_its_choices() -> None:
    """A new field of the run configuration needs a panel, or its option lands among the command's own."""
    assert set(RunConfig.model_fields) <= set(PANELS), set(RunConfig.model_fields) - set(PANELS)
    assert set(CHOICES) == {"target", "sampler", "direction", "objective"}


def test_storage_from_the_environment(tmp_path: Path) -> None:
    """AUTOTUNE_STORAGE keeps a password off the command line; the option wins over it."""
    driverless = "mysql://u@127.0.0.1/db"
    done = autotune("run", TINY, "--target", "inductor", cwd=tmp_path, env={"AUTOTUNE_STORAGE": driverless})
    assert done.returncode == 2 and "driver is not installed" in done.stderr, done.stderr
    assert not (tmp_path / ".autotune").exists()


def test_landscape_is_hidden_from_the_top_level_help(tmp_path: Path) -> None:
    top = autotune("--help", cwd=tmp_path).stdout
    assert " run " in top and "landscape" not in top
    assert "record" in autotune("landscape", "--help", cwd=tmp_path).stdout


def test_trial_timeout_is_named_as_in_run(tmp_path: Path) -> None:
    text = autotune("trial", "--help", cwd=tmp_path).stdout
    assert "--trial-timeout" in text and "--timeout " not in text
    old = autotune("trial", TINY, "--timeout", "0", cwd=tmp_path)
    assert old.returncode == 2, old.stderr
    assert old.stderr.splitlines() == [
        "note: --timeout is deprecated here; use --trial-timeout, as autotune run does",
        "error: --trial-timeout 0.0: Input should be greater than 0"], old.stderr


@pytest.mark.parametrize("args, package, hide", [
    (["serve", "--port", "0"], "fastapi", ("fastapi", "uvicorn", "httpx")),
    (["status"], "httpx", ("fastapi", "uvicorn", "httpx")),
])
def test_the_daemon_without_the_serve_extra_names_it(tmp_path: Path, args: list[str], package: str,
                                                     hide: tuple[str, ...]) -> None:
    done = autotune(*args, cwd=tmp_path, hide=hide)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and f"the package {package}" in line
    assert line.endswith(f'install it with: pip install "{DISTRIBUTION}[serve]"'), line


def test_the_results_table_in_a_pipe_shows_every_knob_whole(tmp_path: Path) -> None:
    """Out of a terminal (CI's log, `| tee`), the table is as wide as its rows: a cut column
    (`batches_per_exec…`) would hide the very configuration the study found."""
    import optuna

    from autotune.storage.attrs import trial_attrs

    storage = f"sqlite:///{tmp_path / 'long.db'}"
    study = optuna.create_study(direction="maximize", storage=storage, study_name="long")
    params = {"batches_per_execution": 10, "host_to_device_transfer_threads": 2, "xla_backend_optimization_level": 0,
              "xla_cpu_enable_fast_math": True, "xla_llvm_disable_expensive_passes": True, "batch_size": 64}
    distributions = {k: optuna.distributions.CategoricalDistribution([v]) for k, v in params.items()}
    for value in (100.0, 150.0):
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value,
                                                  user_attrs=trial_attrs(counted=True)))
    done = autotune("show", "long", "--storage", storage, cwd=tmp_path, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    rows = [line for line in done.stdout.splitlines() if "batches_per_execution=10" in line]
    assert len(rows) == 2, done.stdout
    assert all(", ".join(f"{k}={v}" for k, v in params.items()) in row for row in rows), done.stdout
