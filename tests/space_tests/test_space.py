"""Search spaces: the built-in files, coercion of ``--set`` strings, conditions, and the messages
(with file and line) that a malformed file gets."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from autotune.errors import InvalidConfigError, SpaceError
from autotune.search.configurations import enumerate_space
from autotune.space import SearchSpace, builtin_space, builtin_space_path, config_key, load_space, parse_space

BUILTIN = sorted(p.stem for p in builtin_space_path("xla").parent.glob("*.yaml"))


def line_of(text: str, fragment: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line of ``text`` that contains ``fragment``."""
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if fragment in line]
    assert len(hits) >= occurrence, f"{fragment!r} is not in the test's YAML"
    return hits[occurrence - 1]


def space_error(text: str) -> str:
    with pytest.raises(SpaceError) as info:
        parse_space(text, "space.yaml")
    return str(info.value)


def reported_line(message: str) -> int:
    m = re.match(r"space\.yaml: line (\d+): ", message)
    assert m, f"no 'space.yaml: line N:' prefix in {message!r}"
    return int(m.group(1))


RANGES = textwrap.dedent("""\
    target: inductor
    parameters:
      ratio:
        type: float
        low: 0.0
        high: 1.0
      layers:
        type: int
        low: 1
        high: 12
        default: 4
      mode:
        type: categorical
        choices: [eager, default]
      depth:
        type: int
        choices: [1, 2, 3]
        when: {mode: default}
""")


@pytest.fixture(scope="module")
def xla() -> SearchSpace:
    return builtin_space("xla")


@pytest.fixture(scope="module")
def inductor() -> SearchSpace:
    return builtin_space("inductor")


@pytest.fixture(scope="module")
def ranges() -> SearchSpace:
    return parse_space(RANGES, "ranges.yaml")


# --- the built-in spaces -----------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_space_loads(name: str) -> None:
    space = builtin_space(name)
    assert space.target == name.split("-")[0]
    assert space.parameters
    assert space.source.endswith(f"{name}.yaml")


def test_xla_space(xla: SearchSpace) -> None:
    assert xla.target == "xla"
    assert {"batch_size", "num_workers", "precision", "batches_per_execution", "backend_opt_level",
            "thunk_runtime"} <= set(xla.parameters)
    assert xla.parameters["batch_size"].choices == (8, 16, 32, 64)
    assert xla.parameters["fast_math"].type == "bool"
    # The baseline: parameters without a default keep the script's own behaviour and are absent.
    assert xla.defaults() == {"batches_per_execution": 1, "precision": "fp32"}
    assert xla.known_good == [{"batch_size": 64, "openxla": True}]


def test_inductor_space(inductor: SearchSpace) -> None:
    assert inductor.target == "inductor"
    assert inductor.parameters["mode"].choices[0] == "eager"
    assert inductor.defaults() == {"precision": "fp32"}
    assert inductor.known_good == [{"mode": "default"}, {"batch_size": 64}]


def test_unknown_builtin_space_lists_the_known_ones() -> None:
    with pytest.raises(SpaceError, match="no built-in search space 'tpu-v9'") as info:
        builtin_space("tpu-v9")
    for name in ("xla", "inductor"):
        assert name in str(info.value)


def test_missing_space_file(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="cannot read search space .*nope.yaml"):
        load_space(tmp_path / "nope.yaml")


# --- coercion of --set strings -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "given", "expected"), [
    ("batch_size", "16", 16),
    ("batch_size", 32, 32),
    ("batch_size", 16.0, 16),
    ("num_workers", "0", 0),
    ("fast_math", "true", True),
    ("fast_math", "True", True),
    ("fast_math", "yes", True),
    ("fast_math", "on", True),
    ("fast_math", "1", True),
    ("fast_math", "false", False),
    ("fast_math", "off", False),
    ("fast_math", "0", False),
    ("fast_math", 1, True),
    ("precision", "bf16_model", "bf16_model"),
    ("batches_per_execution", "4", 4),
    ("backend_opt_level", "0", 0),
])
def test_set_strings_are_coerced(xla: SearchSpace, name: str, given: object, expected: object) -> None:
    value = xla.parameters[name].coerce(given)
    assert value == expected
    assert type(value) is type(expected)


def test_coercion_on_ranges(ranges: SearchSpace) -> None:
    assert ranges.parameters["ratio"].coerce("0.25") == 0.25
    assert ranges.parameters["ratio"].coerce("1") == 1.0
    assert ranges.parameters["layers"].coerce("12") == 12
    assert ranges.parameters["layers"].coerce("0x0a") == 10


def test_int_with_a_leading_zero(xla: SearchSpace) -> None:
    assert xla.parameters["batch_size"].coerce("08") == 8


@pytest.mark.parametrize("unset", ["null", "None"])
def test_null_keeps_the_scripts_value(xla: SearchSpace, unset: str) -> None:
    assert xla.parameters["batch_size"].coerce(unset) is None
    assert xla.validate({"batch_size": unset, "fast_math": "true"}) == {"fast_math": True}


def test_validate_is_canonical(xla: SearchSpace) -> None:
    a = xla.validate({"precision": "bf16_model", "batch_size": "16", "fast_math": "1"})
    b = xla.validate({"fast_math": True, "batch_size": 16, "precision": "bf16_model"})
    assert a == b == {"batch_size": 16, "fast_math": True, "precision": "bf16_model"}
    assert list(a) == sorted(a)


def test_a_value_that_leaving_its_parameter_unset_gives_is_the_same_run(xla: SearchSpace) -> None:
    # XLA's own optimisation level is 3 and its thunk runtime is on: setting them is no change.
    assert xla.validate({"backend_opt_level": "3", "thunk_runtime": True, "batch_size": 32}) == {"batch_size": 32}
    assert xla.validate({"backend_opt_level": 2}) == {"backend_opt_level": 2}
    assert config_key(xla.validate({**xla.defaults(), "openxla": False})) == config_key(xla.defaults())
    # Fixed to it (--set), it stays fixed: no longer a knob of the search, and the same run.
    fixed = xla.restrict({"thunk_runtime": "true"})
    assert fixed.fixed == {"thunk_runtime": True}
    assert "thunk_runtime" not in {p.name for p in fixed.free_parameters}
    assert fixed.validate({"batch_size": 32}) == {"batch_size": 32}
    # Given to the script as a flag of its own, unset is the script's default, which nothing knows.
    flagged = xla.with_flags({"backend_opt_level": "--opt-level"})
    assert flagged.validate({"backend_opt_level": 3}) == {"backend_opt_level": 3}


def test_a_space_holds_each_run_once() -> None:
    space = parse_space(GOOD.replace("type: bool\n", "type: bool\n    unset_is: false\n"), "space.yaml")
    assert enumerate_space(space) == [{}, {"mode": "eager"}, {"mode": "default"}, {"fullgraph": True, "mode": "default"}]


def test_unknown_parameter_lists_the_known_ones(xla: SearchSpace) -> None:
    with pytest.raises(InvalidConfigError) as info:
        xla.validate({"bacth_size": "16"})
    message = str(info.value)
    assert "unknown parameter 'bacth_size' for target xla" in message
    known = message.split("known parameters:")[1]
    assert {n.strip() for n in known.split(",")} == set(xla.parameters)


@pytest.mark.parametrize(("name", "given", "fragments"), [
    ("batch_size", "7", ["'batch_size'", "7 is not allowed", "choose one of 8, 16, 32, 64"]),
    ("batch_size", "abc", ["'batch_size'", "'abc' is not a valid int", "8, 16, 32, 64"]),
    ("batch_size", "16.5", ["not a valid int"]),
    ("batch_size", True, ["not a valid int"]),
    ("precision", "fp8", ["'precision'", "'fp8' is not allowed", "fp32, bf16_model, bf16_autocast, xla_use_bf16"]),
    ("fast_math", "maybe", ["'fast_math'", "'maybe' is not a valid bool", "False, True"]),
    ("fast_math", "2", ["not a valid bool"]),
])
def test_bad_values(xla: SearchSpace, name: str, given: object, fragments: list[str]) -> None:
    with pytest.raises(InvalidConfigError) as info:
        xla.validate({name: given})
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(("name", "given", "fragment"), [
    ("ratio", "1.5", "parameter 'ratio': 1.5 is out of range [0, 1]"),
    ("ratio", "-0.1", "parameter 'ratio': -0.1 is out of range [0, 1]"),
    ("ratio", "nan", "out of range [0, 1]"),
    ("layers", "13", "parameter 'layers': 13 is out of range [1, 12]"),
    ("layers", "0", "out of range [1, 12]"),
    ("layers", "two", "'two' is not a valid int; the range is [1, 12]"),
])
def test_out_of_range(ranges: SearchSpace, name: str, given: str, fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ranges.validate({name: given})
    assert fragment in str(info.value)


# --- conditions ----------------------------------------------------------------------------------


def test_when_activates_a_parameter(inductor: SearchSpace) -> None:
    assert inductor.validate({"mode": "default", "freezing": "true"}) == {"freezing": True, "mode": "default"}
    assert inductor.validate({"mode": "max-autotune", "cpp_simdlen": "256"}) == {
        "cpp_simdlen": 256, "mode": "max-autotune"}


@pytest.mark.parametrize("params", [{"freezing": True}, {"mode": "eager", "freezing": True}])
def test_inactive_parameter_is_rejected(inductor: SearchSpace, params: dict) -> None:
    with pytest.raises(InvalidConfigError) as info:
        inductor.validate(params)
    message = str(info.value)
    assert "parameter 'freezing' only applies when mode is one of default, reduce-overhead" in message
    assert "remove it or change mode" in message
    # Fixing a parameter ahead of the mode (``restrict``) is allowed.
    assert inductor.validate(params, allow_inactive=True)["freezing"] is True


def test_when_with_a_single_value(ranges: SearchSpace) -> None:
    depth = ranges.parameters["depth"]
    assert depth.when == {"mode": ("default",)}
    assert depth.is_active({"mode": "default"})
    assert not depth.is_active({"mode": "eager"})
    assert not depth.is_active({})


def test_defaults_leave_out_inactive_parameters() -> None:
    space = parse_space(textwrap.dedent("""\
        target: inductor
        parameters:
          mode: {type: categorical, choices: [eager, default], default: eager}
          fullgraph: {type: bool, default: true, when: {mode: [default]}}
    """))
    assert space.defaults() == {"mode": "eager"}


def test_fixed_parameters_are_part_of_every_configuration() -> None:
    space = parse_space(textwrap.dedent("""\
        target: xla
        parameters:
          fast_math: {type: bool}
          batch_size: {type: int, choices: [8, 16]}
        fixed: {fast_math: "true"}
    """))
    assert space.fixed == {"fast_math": True}
    assert space.validate({"batch_size": "8"}) == {"batch_size": 8, "fast_math": True}
    assert [p.name for p in space.free_parameters] == ["batch_size"]


# --- malformed files: the message names the file and the right line --------------------------------

GOOD = textwrap.dedent("""\
    target: inductor
    parameters:
      mode:
        type: categorical
        choices: [eager, default]
      fullgraph:
        type: bool
        when: {mode: [default]}
""")


def test_a_good_file_parses() -> None:
    space = parse_space(GOOD, "space.yaml")
    assert set(space.parameters) == {"mode", "fullgraph"}


MALFORMED: dict[str, tuple[str, str, str]] = {
    # name: (YAML, fragment whose line is reported, fragment of the message)
    "duplicate parameter": (GOOD + "  mode:  # again\n    type: bool\n", "# again", "duplicate key 'mode'"),
    "duplicate key in a parameter": (
        GOOD.replace("type: bool\n", "type: bool\n    type: int\n"), "type: int", "duplicate key 'type'"),
    "duplicate top-level key": ("target: xla\n" + GOOD, "target: inductor", "duplicate key 'target'"),
    "bad type": (GOOD.replace("type: bool", "type: boolean"), "type: boolean",
                 "parameter 'fullgraph': type must be one of categorical, int, float, bool"),
    "unknown parameter key": (GOOD.replace("choices: [eager", "choises: [eager"), "choises",
                              "parameter 'mode': unknown key 'choises'"),
    "unknown top-level key": (GOOD + "fixd: {mode: eager}\n", "fixd", "unknown key 'fixd'"),
    "bad YAML indentation": (GOOD.replace("    choices: [eager", "   choices: [eager"), "   choices",
                             "not valid YAML"),
    "unclosed bracket": (GOOD.replace("choices: [eager, default]", "choices: [eager, default"), "fullgraph:",
                         "not valid YAML"),
    "when names an unknown parameter": (GOOD.replace("when: {mode:", "when: {mod:"), "when:",
                                        "parameter 'fullgraph': 'when' names unknown parameter 'mod'"),
    "when names an impossible value": (GOOD.replace("when: {mode: [default]}", "when: {mode: [turbo]}"), "when:",
                                       "mode='turbo' can never happen"),
    "when names the parameter itself": (GOOD.replace("when: {mode:", "when: {fullgraph: [true], mode:"),
                                        "when:", "'when' cannot name itself"),
    "default not among the choices": (GOOD.replace("choices: [eager, default]",
                                                   "choices: [eager, default]\n    default: turbo"),
                                      "default: turbo", "default: parameter 'mode': 'turbo' is not allowed"),
    "default of the wrong type": (GOOD.replace("type: bool", "type: bool\n    default: sometimes"),
                                  "default: sometimes", "'sometimes' is not a valid bool"),
    "empty choices": (GOOD.replace("choices: [eager, default]", "choices: []"), "choices: []",
                      "'choices' must be a non-empty list"),
    "duplicate choices": (GOOD.replace("[eager, default]", "[eager, eager]"), "choices: [eager, eager]",
                          "'choices' has duplicates"),
    "choices and a range": (GOOD.replace("choices: [eager, default]", "choices: [eager, default]\n    low: 1"),
                            "low: 1", "either 'choices' or 'low'/'high'"),
    "parameter not a mapping": (GOOD + "  depth: 3\n", "depth: 3", "parameter 'depth' must be a mapping"),
    "categorical without choices": (GOOD + "  depth:\n    type: categorical  # no choices\n", "# no choices",
                                    "parameter 'depth': a categorical parameter needs 'choices'"),
    "log range from zero": (GOOD + "  lr:\n    type: float\n    low: 0\n    high: 1\n    log: true\n", "log: true",
                            "a log range needs 'low' > 0"),
    "fixed names an unknown parameter": (GOOD + "fixed: {depth: 3}\n", "fixed:", "unknown parameter 'depth'"),
    "known_good with a bad value": (GOOD + "known_good:\n  - {mode: turbo}\n", "known_good:",
                                    "known_good[0]: parameter 'mode': 'turbo' is not allowed"),
    "choices not a list": (GOOD.replace("choices: [eager, default]", "choices: eager"), "choices: eager",
                           "parameter 'mode': 'choices': input should be a valid list"),
    "bound not a number": (GOOD + "  depth:\n    type: int\n    low: one\n    high: 2\n", "low: one",
                           "parameter 'depth': 'low' must be a number"),
    "when not a mapping": (GOOD.replace("when: {mode: [default]}", "when: default"), "when: default",
                           "parameter 'fullgraph': 'when': input should be a valid dictionary"),
    "target missing": (GOOD.replace("target: inductor\n", "description: no target\n"), "description",
                       "'target' must name a target"),
    "arg that is no flag": (GOOD.replace("type: bool\n", "type: bool\n    arg: fullgraph\n"), "arg: fullgraph",
                            "parameter 'fullgraph': 'fullgraph' is not a flag of a script's command line"),
    "intercept without arg": (GOOD.replace("type: bool\n", "type: bool\n    intercept: true\n"), "intercept:",
                              "parameter 'fullgraph': 'intercept' keeps the target's way"),
    "unset_is beside a default": (GOOD.replace("type: bool\n", "type: bool\n    default: false\n    unset_is: false\n"),
                                  "unset_is:", "parameter 'fullgraph': 'unset_is' says what leaving it unset gives"),
    "unset_is not a value": (GOOD.replace("choices: [eager, default]", "choices: [eager, default]\n    unset_is: turbo"),
                             "unset_is: turbo", "unset_is: parameter 'mode': 'turbo' is not allowed"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_file_reports_its_line(case: str) -> None:
    text, where, fragment = MALFORMED[case]
    message = space_error(text)
    assert fragment in message
    assert reported_line(message) == line_of(text, where)


def test_numeric_range_with_low_above_high_points_into_the_parameter() -> None:
    text = GOOD + "  depth:\n    type: int\n    low: 8\n    high: 2\n"
    message = space_error(text)
    assert "parameter 'depth': a numeric range needs 'low' <= 'high'" in message
    assert line_of(text, "  depth:") < reported_line(message) <= line_of(text, "high: 2")


def test_not_a_mapping() -> None:
    assert space_error("- 1\n- 2\n") == "space.yaml: a search space is a mapping with 'target' and 'parameters'"
    assert "a search space is a mapping" in space_error("")


CONTRADICTORY_DEFAULTS = textwrap.dedent("""\
    target: inductor
    parameters:
      mode:
        type: categorical
        choices: [eager, default]
        default: eager
      fullgraph:
        type: bool
        default: true
        when: {mode: [default]}
      dynamic:
        type: bool
        default: true
        when: {fullgraph: [true]}
""")


def test_contradictory_defaults_are_rejected() -> None:
    # dynamic's default needs fullgraph=true, whose own default is inactive under mode=eager.
    message = space_error(CONTRADICTORY_DEFAULTS)
    assert "the defaults contradict each other" in message
    assert "parameter 'dynamic' only applies when fullgraph is one of True" in message


def test_contradictory_defaults_report_the_parameters_line() -> None:
    message = space_error(CONTRADICTORY_DEFAULTS)
    text = CONTRADICTORY_DEFAULTS
    assert line_of(text, "dynamic:") <= reported_line(message) <= line_of(text, "when: {fullgraph")


def test_yaml_merge_keys_are_understood() -> None:
    space = parse_space(textwrap.dedent("""\
        target: xla
        parameters:
          fast_math: &flag
            type: bool
            description: an XLA flag
          xnnpack:
            <<: *flag
    """))
    assert space.parameters["xnnpack"].type == "bool"


def test_a_parameter_held_unset_takes_the_parameters_that_need_it_out_of_the_space() -> None:
    # A study holds mode at the script's own (unset) once a trial shows it never reached the
    # script; fullgraph, dynamic, ... apply only under a compiled mode and can never apply now.
    inductor = builtin_space("inductor")
    needs_mode = {p.name for p in inductor.parameters.values() if "mode" in p.when}
    assert {"fullgraph", "cpp_simdlen"} <= needs_mode
    held = inductor.restrict({"mode": None})
    assert not needs_mode & set(held.parameters) and "mode" not in held.parameters
    assert [p.name for p in held.in_dependency_order()] == [n for n in inductor.parameters
                                                             if n != "mode" and n not in needs_mode]
    assert held.validate({"batch_size": 32}) == {"batch_size": 32, **held.fixed}
    configs = enumerate_space(held.restrict({"batch_size": 32, "num_workers": 0}))
    assert configs and all(set(c) <= set(held.parameters) for c in configs)
    # A condition that allows the unset value holds with it, and is dropped.
    space = parse_space(textwrap.dedent("""\
        target: inductor
        parameters:
          mode: {type: categorical, choices: [eager, default]}
          fullgraph: {type: bool, when: {mode: [default]}}
          freezing: {type: bool, when: {mode: [null, default]}}
          dynamic: {type: bool, when: {fullgraph: [true]}}
        """), "space.yaml")
    held = space.restrict({"mode": None})
    assert set(held.parameters) == {"freezing"} and held.parameters["freezing"].when == {}


LOADER_SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32, 64]}
  num_workers: {type: int, choices: [0, 1, 2]}
  prefetch_factor: {type: int, choices: [2, 4], when: {num_workers: [1, 2]}}
  mode: {type: categorical, choices: [eager, default], default: eager}
"""


def test_the_scripts_own_loader_values_are_the_same_run_as_leaving_them_unset() -> None:
    space = parse_space(LOADER_SPACE, "space.yaml")
    assert space.validate({"batch_size": 32}) == {"batch_size": 32}
    learned = space.same_as_script({"batch_size": 32, "num_workers": 0, "mode": "eager", "threads": 4})
    # The script's own batch size is leaving it unset; another is a configuration of its own.
    assert learned.validate({"batch_size": 32, "mode": "eager"}) == learned.validate({"mode": "eager"})
    assert learned.validate({"batch_size": 64}) == {"batch_size": 64}
    # num_workers is named by prefetch_factor's condition: leaving it unset is not the same there.
    assert learned.parameters["num_workers"].unset_is is None
    # mode has a default of its own: the baseline sets it, so the script's value says nothing.
    assert learned.parameters["mode"].unset_is is None
    assert learned.defaults() == space.defaults()
    assert len({config_key(c) for c in enumerate_space(learned)}) < len(enumerate_space(space))
    # A value the space cannot take, or one it knows already, changes nothing.
    assert space.same_as_script({"batch_size": 128}) is space
    assert learned.same_as_script({"batch_size": 16}) is learned


def test_a_batch_size_given_as_the_scripts_flag_learns_nothing_from_its_loader() -> None:
    # The flag may mean a global batch that the script divides among its processes.
    space = parse_space(LOADER_SPACE, "space.yaml").with_flags({"batch_size": "--batch-size"})
    assert space.same_as_script({"batch_size": 32}) is space
