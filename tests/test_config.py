"""One run configuration: the CLI's options, the Python API, the daemon's job body and a job's
command line all derive from :mod:`autotune.config`, with the same defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command

from autotune.cli import app
from autotune.config import JobConfig, RunConfig
from autotune.daemon.messages import RunOptions
from autotune.errors import InvalidConfigError
from autotune.study.options import StudyOptions

ROOT = Path(__file__).resolve().parents[1]
COMMAND = get_command(app)

#: A value other than the default for every option, as ``autotune run`` parses it back.
CHANGED = {"trials": 7, "target": "inductor", "space": "inductor", "platform": "inf2",
           "sets": {"batch_size": "16", "mode": "eager"}, "arg": ["batch_size=--batch_size", "fullgraph=-f"],
           "env": ["PJRT_DEVICE=CUDA", "XLA_FLAGS=--xla_cpu_enable_fast_math=true --a=b"],
           "workers": 3, "cores_per_trial": 2, "gpus_per_trial": 2, "nproc_per_node": 2, "nnodes": 2, "compile_workers": 4,
           "compile_ahead": 8,
           "study": "s",
           "trial_timeout": 90.5, "timeout": 600.0, "sampler": "tpe", "seed": 4, "metric": "loss",
           "direction": "minimize", "memory_limit": "8GiB", "fresh": True, "retry_failed": True,
           "loss_tolerance": 0.5, "numerics_guard": False, "prune": False, "race": 0.5, "confirm": 2,
           "instance_type": "inf2.xlarge", "price_per_hour": 1.967861, "prices": Path("/tmp/prices.yaml"),
           "budget_usd": 12.5, "budget_hours": 0.75,
           "warm_start": ["train-xla", "train-xla-1a2b3c4d"], "warm": False,
           "ray_address": "10.0.0.5:6379", "storage": "sqlite:////tmp/x.db", "out": Path("/tmp/out"),
           "cache": Path("/tmp/cache"), "objective": ["latency_p99", "throughput"],
           "constraint": ["throughput>=200", "peak_memory<=12GiB"], "prefer": "throughput"}


def _params(command: str) -> dict:
    return {p.name: p for p in COMMAND.commands[command].params}


def _cli_default(command: str, name: str):
    param = _params(command)["set_" if name == "sets" else name]
    if name == "sets":
        return {}
    return [] if param.multiple and param.default is None else param.default  # a repeatable option given never


def test_every_option_has_a_changed_value_here() -> None:
    assert set(CHANGED) == set(RunConfig.model_fields)


@pytest.mark.parametrize("command, model", [("run", RunConfig), ("submit", JobConfig), ("ensure", RunConfig)])
def test_the_commands_defaults_are_the_configurations(command: str, model: type[JobConfig]) -> None:
    fields = {n: f for n, f in model.model_fields.items()
              if command != "ensure" or n not in ("out", "study", "fresh")}
    for name, field in fields.items():
        assert _cli_default(command, name) == field.get_default(call_default_factory=True), name
        if command == "run":
            assert _params(command)["set_" if name == "sets" else name].help == field.description, name


def test_the_api_and_the_daemon_take_their_defaults_from_the_same_fields() -> None:
    for name, field in RunConfig.model_fields.items():
        assert StudyOptions.model_fields[name].get_default(call_default_factory=True) == \
            field.get_default(call_default_factory=True), name
    for name, field in JobConfig.model_fields.items():
        assert RunOptions.model_fields[name].get_default(call_default_factory=True) == \
            field.get_default(call_default_factory=True), name
    assert RunConfig().argv() == [] and RunOptions().argv() == []


def test_a_configuration_survives_its_command_line() -> None:
    config = RunConfig(**CHANGED)
    argv = config.argv()
    ctx = COMMAND.commands["run"].make_context("run", ["train.py", *argv])
    parsed = {("sets" if k == "set_" else k): v for k, v in ctx.params.items()
              if k not in ("script", "script_args", "json_out")}
    parsed["sets"] = dict(item.split("=", 1) for item in parsed["sets"])
    parsed = {k: list(v) if isinstance(v, tuple) else v for k, v in parsed.items()}
    assert RunConfig(**parsed) == config


def test_bad_values_name_their_option() -> None:
    with pytest.raises(InvalidConfigError, match=r"^--trials 0: .*greater than or equal to 1"):
        RunConfig.checked(trials=0)
    with pytest.raises(InvalidConfigError, match=r"^--target 'tpu9000': unknown target"):
        RunConfig.checked(target="tpu9000")
    with pytest.raises(InvalidConfigError, match="unknown sampler"):
        StudyOptions.checked(script="x.py", sampler="annealing")
    with pytest.raises(InvalidConfigError, match="^--study .*must be letters"):
        RunOptions.checked(study="a b")
    for cap in (0, -1.0, float("inf")):
        with pytest.raises(InvalidConfigError, match="^--budget-(usd|hours) "):
            RunConfig.checked(budget_usd=cap)
        with pytest.raises(InvalidConfigError, match="^--budget-hours "):
            RunConfig.checked(budget_hours=cap)
    for price in (0, -1.5, float("nan"), float("inf")):
        with pytest.raises(InvalidConfigError, match="^--price-per-hour .*positive number of US dollars"):
            RunConfig.checked(price_per_hour=price)
    with pytest.raises(InvalidConfigError, match="^--instance-type 'INF2 xlarge': not an EC2 instance type"):
        RunConfig.checked(instance_type="INF2 xlarge")
    for item in ("PJRT_DEVICE", "1X=2", "A B=1", "=CUDA"):
        with pytest.raises(InvalidConfigError, match=r"^--env .*expected NAME=VALUE"):
            RunConfig.checked(env=[item])
    assert RunConfig.checked(env=["A=1=2", "B=", "A=3"]).trial_env() == {"A": "3", "B": ""}


def test_a_run_options_default_is_written_once() -> None:
    """The defaults that were repeated across the CLI, the study, the daemon and the job's
    command line (trials 20, trial timeout 1800 s, the sampler's name, the loss tolerance)."""
    sources = [p for p in (ROOT / "autotune").rglob("*.py")] + list((ROOT / "workers").rglob("*.py"))
    for pattern in (r"\b1800(\.0)?\b", r"\btrials\b[^\n]*\b20\b", r"\bloss_tolerance\b[^\n]*\b0\.2\b"):
        hits = [f"{p.relative_to(ROOT)}:{i}" for p in sources
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(pattern, line) and not line.lstrip().startswith("#")]
        assert hits and all(h.startswith("autotune/config.py:") for h in hits), (pattern, hits)
    samplers = [p.relative_to(ROOT) for p in sources if '"autotune", "tpe", "random", "qmc"' in p.read_text()]
    assert samplers == [Path("autotune/config.py")]


def test_a_daemon_job_carries_the_callers_env_vars_that_a_target_reads(monkeypatch) -> None:
    # The job runs in the daemon's environment: the caller's PJRT_DEVICE and XLA_FLAGS travel in
    # its options, as data, down to the job's command line.
    from autotune.cli.daemon import _run_options

    monkeypatch.setenv("PJRT_DEVICE", "CUDA")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    monkeypatch.setenv("AUTOTUNE_UNRELATED", "1")
    run, _ = _run_options(JobConfig.checked(env=["PJRT_DEVICE=TPU", "OMP_NUM_THREADS=2"]))
    assert run.trial_env() == {"PJRT_DEVICE": "TPU", "XLA_FLAGS": "--xla_cpu_enable_fast_math=true",
                               "OMP_NUM_THREADS": "2"}
    assert "--env=XLA_FLAGS=--xla_cpu_enable_fast_math=true" in RunOptions.model_validate_json(run.model_dump_json()).argv()
