"""Parameters given to the script as flags of its own (``arg:`` in a space file, ``--arg`` on the
command line): the arguments the script gets, the plan that leaves the target's way of applying
them out, the keys that stay those of the configuration, and how each parameter reaches the script."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.config import RunConfig
from autotune.errors import InvalidConfigError
from autotune.records import HarnessReport, Measurement, ScriptFlag
from autotune.space import compile_key, config_key, parse_space
from autotune.targets import get_target
from autotune.trial import plan_for, prepare_trial
from autotune.harness.knob_effects import knob_effects

SPACE = textwrap.dedent("""\
    target: inductor
    parameters:
      batch_size:
        type: int
        choices: [16, 64, 128]
        arg: --batch_size
      num_workers:
        type: int
        choices: [0, 2]
        arg: -w
        intercept: true
      precision:
        type: categorical
        choices: [fp32, bf16_autocast]
      fullgraph:
        type: bool
        arg: --fullgraph
""")


@pytest.mark.parametrize(("args", "value", "expected"), [
    ([], "128", ["--batch_size", "128"]),
    (["--batch_size", "32", "--lr", "1"], "128", ["--batch_size", "128", "--lr", "1"]),
    (["--batch_size=32"], "128", ["--batch_size=128"]),
    (["--lr", "1", "--", "--batch_size", "5"], "128", ["--lr", "1", "--batch_size", "128", "--", "--batch_size", "5"]),
    (["--batch_size"], "128", ["--batch_size", "128"]),
])
def test_a_flag_replaces_the_scripts_value_or_is_added(args: list[str], value: str, expected: list[str]) -> None:
    assert ScriptFlag.of("batch_size", "--batch_size", int(value)).apply(args) == expected


def test_a_short_flag_keeps_the_form_the_arguments_wrote() -> None:
    flag = ScriptFlag.of("batch_size", "-b", 8)
    assert flag.apply(["-b16", "--x"]) == ["-b8", "--x"]
    assert flag.apply(["-b", "16"]) == ["-b", "8"]
    assert flag.apply(["--bar"]) == ["--bar", "-b", "8"]


def test_a_bool_is_a_switch_present_when_true() -> None:
    on, off = ScriptFlag.of("amp", "--amp", True), ScriptFlag.of("amp", "--amp", False)
    assert on.apply(["--x"]) == ["--x", "--amp"] and on.apply(["--amp"]) == ["--amp"]
    assert off.apply(["--amp", "--x"]) == ["--x"] and off.apply(["--x"]) == ["--x"]
    assert (on.describe(), off.describe()) == ("--amp", "without --amp")


def test_a_flag_in_a_space_file_leaves_the_targets_way_out_unless_intercepted() -> None:
    space = parse_space(SPACE, "space.yaml")
    params = space.validate({"batch_size": 64, "num_workers": 2, "precision": "bf16_autocast", "fullgraph": False})
    plan = plan_for(get_target("inductor"), space, params)
    assert plan.params == params
    assert plan.knobs.batch_size is None  # the script's flag alone
    assert plan.knobs.num_workers == 2  # intercept: true, so the DataLoader's too
    assert plan.knobs.autocast_dtype == "bfloat16"
    assert plan.knobs.compile is None  # fullgraph reached the target no more than the batch size did
    assert plan.script_args(["--lr", "1", "--fullgraph"]) == ["--lr", "1", "--batch_size", "64", "-w", "2"]
    kinds = {name: [r.kind for r in routes] for name, routes in plan.routes.items()}
    assert kinds == {"batch_size": ["script argument"], "num_workers": ["interception", "script argument"],
                     "precision": ["interception"], "fullgraph": ["script argument"]}


def test_the_keys_of_a_configuration_do_not_depend_on_how_it_is_applied() -> None:
    flagged = parse_space(SPACE, "space.yaml")
    plain = parse_space(SPACE.replace("    arg: --batch_size\n", ""), "plain.yaml")
    params = {"batch_size": 64, "precision": "bf16_autocast"}
    a = plan_for(get_target("inductor"), flagged, flagged.validate(params))
    b = plan_for(get_target("inductor"), plain, plain.validate(params))
    assert a.params == b.params
    assert config_key(a.params) == config_key(b.params) and compile_key(a.params) == compile_key(b.params)
    assert a.knobs.batch_size is None and b.knobs.batch_size == 64


def test_the_command_line_gives_a_builtin_parameter_a_flag(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    config = RunConfig.checked(arg=["batch_size=--batch_size"], sets={"batch_size": "16"})
    prepared = prepare_trial(script, target="inductor", sets=config.sets, flags=config.script_flags())
    assert prepared.plan.knobs.batch_size is None
    assert prepared.plan.script_args(["--batch_size", "4"]) == ["--batch_size", "16"]
    with pytest.raises(InvalidConfigError, match="unknown parameter 'lr'"):
        prepare_trial(script, target="inductor", flags={"lr": "--lr"})
    with pytest.raises(InvalidConfigError, match="process count of torchrun"):
        prepare_trial(script, target="inductor", sets={"nproc_per_node": "2"}, flags={"nproc_per_node": "--n"})


@pytest.mark.parametrize(("items", "fragment"), [
    (["batch_size"], "expected PARAM=FLAG"),
    (["batch_size=batch"], "'batch' is not a flag"),
    (["batch_size=--a", "batch_size=--b"], "a parameter is given two flags"),
])
def test_bad_arg_options_name_the_option(items: list[str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"^--arg .*{fragment}"):
        RunConfig.checked(arg=items)


def _measured(samples: float) -> Measurement:
    return Measurement(throughput=100.0, ci95_low=90.0, ci95_high=110.0, step_time_median=0.01, step_time_p90=0.01,
                       samples_per_step=samples, steps_measured=100, windows=5, converged=True, warmup_steps=3,
                       warmup_seconds=1.0)


def test_a_batch_size_given_as_a_flag_took_effect_when_the_steps_hold_its_samples() -> None:
    space = parse_space(SPACE, "space.yaml")
    plan = plan_for(get_target("inductor"), space, space.validate({"batch_size": 64, "precision": "fp32"}))
    (batch, precision) = knob_effects(plan, HarnessReport(measurement=_measured(64)), [])
    assert batch.took_effect is True and "64 samples per step measured" in batch.detail
    assert precision.took_effect is None and precision.routes == []  # fp32 is the script's own
    (batch, _) = knob_effects(plan, HarnessReport(measurement=_measured(20)), [])
    assert batch.took_effect is False and "20 samples per step measured" in batch.detail


def test_an_intercepted_batch_size_without_a_dataloader_is_a_warning() -> None:
    space = parse_space(SPACE.replace("    arg: --batch_size\n", ""), "plain.yaml")
    plan = plan_for(get_target("inductor"), space, space.validate({"batch_size": 64, "precision": "bf16_autocast"}))
    report = HarnessReport(measurement=_measured(32), knobs_applied={"batch_size": False, "autocast_dtype": True,
                                                                      "autocast_device": True})
    from autotune.records import TrialResult

    result = TrialResult(status="ok", plan=plan, knobs=knob_effects(plan, report, []))
    batch, precision = result.knobs
    assert batch.took_effect is False and "made no DataLoader" in batch.detail
    assert precision.took_effect is True
    assert result.warnings == [f"batch_size=64: {batch.detail}"]
    assert "warnings" in result.model_dump(mode="json")
