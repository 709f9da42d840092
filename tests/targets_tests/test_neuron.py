"""Contract tests of the Neuron target: the exact env and flag strings a configuration turns into.

No Neuron device or compiler exists here, so these pin what the documentation says the trial
process must be started with; ``test_neuron_device.py`` runs the same plans on a real device.
"""

from __future__ import annotations

import random

import pytest

from autotune.errors import InvalidConfigError, TargetError
from autotune.records import CompileSpec
from autotune.space import builtin_space
from autotune.targets import get_target
from autotune.trial import load_trial_space, prepare_trial
from autotune.workers.launcher import trial_env
from autotune.machine import host
from autotune.targets.neuron import platform as neuron_platform
from autotune.targets.neuron import target as neuron_target
from autotune.targets.neuron import (
    NeuronTarget,
    canonical_flags,
    compile_cache_env,
    neuron_present,
)

SPACES = ("neuron-trn1", "neuron-inf2", "neuron-trn2", "neuron-inf2-inference")


@pytest.fixture
def target() -> NeuronTarget:
    return NeuronTarget()


# --- plans: exact env and knobs ------------------------------------------------------------


def test_registered_under_its_name() -> None:
    assert isinstance(get_target("neuron"), NeuronTarget)
    assert NeuronTarget.name == "neuron"
    assert NeuronTarget.spaces == SPACES


def test_published_winner_on_inf2(target: NeuronTarget) -> None:
    plan = target.plan({"precision": "bf16_model", "model_type": "transformer", "optlevel": 3,
                        "target": "inf2", "batches_per_execution": 10, "batch_size": 8})
    assert plan.target == "neuron"
    assert plan.flags_env == "NEURON_CC_FLAGS"
    assert plan.env == {"NEURON_CC_FLAGS": "--target=inf2 --model-type=transformer --optlevel=3"}
    assert plan.compiler_flags == "--target=inf2 --model-type=transformer --optlevel=3"
    assert plan.knobs.model_dtype == "bfloat16"
    assert plan.knobs.batches_per_execution == 10
    assert plan.knobs.batch_size == 8
    assert plan.knobs.lazy_device is True
    assert plan.knobs.compile is None
    assert plan.knobs.autocast_device is None


def test_every_xla_flag_in_canonical_order(target: NeuronTarget) -> None:
    plan = target.plan({
        "fast_loading": True, "mixed_precision_accumulation": True, "optlevel": 1, "lnc": 2,
        "auto_cast_type": "fp8_e4m3", "auto_cast": "matmult", "model_type": "unet-inference",
        "target": "trn2", "stochastic_rounding": True, "num_workers": 2,
    })
    assert plan.env == {
        "NEURON_CC_FLAGS": "--target=trn2 --model-type=unet-inference --auto-cast=matmult "
                           "--auto-cast-type=fp8_e4m3 --logical-nc-config=2 --optlevel=1 "
                           "--enable-mixed-precision-accumulation --enable-fast-loading-neuron-binaries",
        "NEURON_LOGICAL_NC_CONFIG": "2",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
    }
    assert plan.knobs.num_workers == 2


def test_switches_turned_off(target: NeuronTarget) -> None:
    plan = target.plan({"target": "trn1", "mixed_precision_accumulation": False, "fast_loading": False,
                        "stochastic_rounding": False, "auto_cast": "none"})
    # fast loading has no "off" flag: off is its absence.
    assert plan.env == {
        "NEURON_CC_FLAGS": "--target=trn1 --auto-cast=none --disable-mixed-precision-accumulation",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "0",
    }
    assert any("--disable-mixed-precision-accumulation exists since Neuron 2.27" in n for n in plan.notes)


def test_auto_cast_all_bf16(target: NeuronTarget) -> None:
    plan = target.plan({"target": "trn1n", "auto_cast": "all", "auto_cast_type": "bf16"})
    assert plan.env == {"NEURON_CC_FLAGS": "--target=trn1n --auto-cast=all --auto-cast-type=bf16"}
    assert not any("compiler's default" in n for n in plan.notes)


def test_baseline_sets_nothing(target: NeuronTarget) -> None:
    plan = target.plan({})
    assert plan.env == {}
    assert plan.compiler_flags is None
    assert plan.flags_env == "NEURON_CC_FLAGS"
    assert plan.knobs.lazy_device is True
    # The default of --auto-cast changed in Neuron 2.27: an unset auto_cast is worth a note.
    assert any("none since Neuron 2.27 (matmult before)" in n for n in plan.notes)


def test_precision_bf16_autocast_on_xla(target: NeuronTarget) -> None:
    plan = target.plan({"precision": "bf16_autocast"})
    assert (plan.knobs.autocast_device, plan.knobs.autocast_dtype) == ("xla", "bfloat16")
    assert plan.knobs.model_dtype is None
    assert plan.env == {}


def test_precision_xla_use_bf16_is_deprecated(target: NeuronTarget) -> None:
    plan = target.plan({"precision": "xla_use_bf16"})
    assert plan.env == {"XLA_USE_BF16": "1"}
    assert any("deprecated since torch-neuronx 2.5" in n for n in plan.notes)
    assert any("stochastic rounding" in n for n in plan.notes)
    plan = target.plan({"precision": "xla_use_bf16", "stochastic_rounding": False})
    assert plan.env == {"XLA_USE_BF16": "1", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "0"}
    assert not any("also turns on stochastic rounding" in n for n in plan.notes)


def test_precision_xla_downcast_bf16(target: NeuronTarget) -> None:
    plan = target.plan({"precision": "xla_downcast_bf16"})
    assert plan.env == {"XLA_DOWNCAST_BF16": "1"}
    assert any("XLA_DOWNCAST_BF16 is deprecated" in n for n in plan.notes)
    assert any("XLA_DOWNCAST_BF16 also turns on stochastic rounding" in n for n in plan.notes)
    with pytest.raises(InvalidConfigError, match="sets XLA_DOWNCAST_BF16, which only the xla path reads"):
        target.check({"path": "native", "precision": "xla_downcast_bf16"})


def test_precision_fp32_changes_nothing(target: NeuronTarget) -> None:
    plan = target.plan({"precision": "fp32"})
    assert plan.env == {}
    assert (plan.knobs.model_dtype, plan.knobs.autocast_dtype) == (None, None)


def test_native_path(target: NeuronTarget) -> None:
    plan = target.plan({"path": "native", "native_opt_level": 2, "logical_nc_config": 1,
                        "model_type": "transformer", "precision": "bf16_autocast", "batch_size": 16,
                        "auto_cast": "none", "stochastic_rounding": True})
    assert plan.env == {
        "NEURON_COMPILER_OPT_LEVEL": "-O2",
        "NEURON_LOGICAL_NC_CONFIG": "1",
        "NEURON_CC_FLAGS": "--model-type=transformer --auto-cast=none --logical-nc-config=1",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
    }
    assert plan.flags_env == "NEURON_CC_FLAGS"
    assert plan.knobs.compile == CompileSpec(backend="neuron")
    assert (plan.knobs.autocast_device, plan.knobs.autocast_dtype) == ("neuron", "bfloat16")
    assert plan.knobs.lazy_device is False
    assert plan.knobs.batches_per_execution is None
    assert plan.knobs.batch_size == 16
    assert not any("auto-cast" in n for n in plan.notes)


def test_native_baseline_still_compiles_with_neuron(target: NeuronTarget) -> None:
    plan = target.plan({"path": "native"})
    assert plan.env == {}
    assert plan.knobs.compile == CompileSpec(backend="neuron")


@pytest.mark.parametrize("level", [1, 2, 3])
def test_native_opt_level_spelling(target: NeuronTarget, level: int) -> None:
    env = target.plan({"path": "native", "native_opt_level": level}).env
    assert env == {"NEURON_COMPILER_OPT_LEVEL": f"-O{level}"}


def test_native_drops_the_users_opt_level(target: NeuronTarget) -> None:
    plan = target.plan({"path": "native", "native_opt_level": 1},
                       {"NEURON_CC_FLAGS": "-O3 --model-type=transformer"})
    assert plan.env == {"NEURON_COMPILER_OPT_LEVEL": "-O1", "NEURON_CC_FLAGS": "--model-type=transformer"}
    assert any("NEURON_COMPILER_OPT_LEVEL" in n for n in plan.notes)


def test_native_notes_wrapper_flags(target: NeuronTarget) -> None:
    plan = target.plan({"path": "native"}, {"NEURON_CC_FLAGS": "--retry_failed_compilation"})
    assert plan.env == {"NEURON_CC_FLAGS": "--retry_failed_compilation"}
    assert any("neuron_cc_wrapper" in n for n in plan.notes)


def test_plan_merges_exported_flags(target: NeuronTarget) -> None:
    base_env = {"NEURON_CC_FLAGS": "--cache_dir=/shared/cache -O1 --enable-saturate-infinity "
                                   "--model-type transformer",
                "PATH": "/usr/bin"}
    plan = target.plan({"optlevel": 3, "target": "trn1"}, base_env)
    assert plan.env == {"NEURON_CC_FLAGS": "--target=trn1 --model-type=transformer --optlevel=3 "
                                           "--enable-saturate-infinity --cache_dir=/shared/cache"}
    # The user's own --auto-cast counts: no note about the compiler's default then.
    plan = target.plan({"target": "trn1"}, {"NEURON_CC_FLAGS": "--auto-cast matmult"})
    assert plan.env == {"NEURON_CC_FLAGS": "--target=trn1 --auto-cast=matmult"}
    assert not any("compiler's default" in n for n in plan.notes)


def test_plan_keeps_params_as_given(target: NeuronTarget) -> None:
    params = {"optlevel": 2, "target": "trn1"}
    assert target.plan(params).params == params


# --- canonical_flags -----------------------------------------------------------------------


def test_dict_order_does_not_matter() -> None:
    params = {"target": "trn1", "model_type": "transformer", "optlevel": 3, "auto_cast": "matmult",
              "auto_cast_type": "bf16", "mixed_precision_accumulation": True, "fast_loading": True}
    expected = canonical_flags(params)
    rng = random.Random(0)
    for _ in range(20):
        items = list(params.items())
        rng.shuffle(items)
        assert canonical_flags(dict(items)) == expected
    assert expected == ("--target=trn1 --model-type=transformer --auto-cast=matmult --auto-cast-type=bf16 "
                        "--optlevel=3 --enable-mixed-precision-accumulation "
                        "--enable-fast-loading-neuron-binaries")


def test_unset_params_write_nothing() -> None:
    assert canonical_flags({}) == ""
    assert canonical_flags({"model_type": None, "optlevel": None, "fast_loading": None}) == ""
    # Parameters that are not compiler flags are not written either.
    assert canonical_flags({"batch_size": 8, "precision": "bf16_model", "path": "xla"}) == ""


@pytest.mark.parametrize("user", [
    "-O3", "-O 3", "-O=3", "--optlevel=3", "--optlevel 3", "--O 3", "--O=3",
])
def test_every_optlevel_spelling_is_one_flag(user: str) -> None:
    assert canonical_flags({}, user) == "--optlevel=3"
    assert canonical_flags({"optlevel": 1}, user) == "--optlevel=1"


@pytest.mark.parametrize("user", [
    "-lnc 2", "-lnc=2", "--lnc 2", "--lnc=2", "--logical-nc-config 2", "--logical-nc-config=2",
])
def test_every_lnc_spelling_is_one_flag(user: str) -> None:
    assert canonical_flags({}, user) == "--logical-nc-config=2"
    assert canonical_flags({"lnc": 1}, user) == "--logical-nc-config=1"
    assert canonical_flags({"logical_nc_config": 1}, user) == "--logical-nc-config=1"


def test_user_config_equal_to_params_gives_the_same_string() -> None:
    # The compile cache hashes the string: the same compiler configuration must spell the same.
    from_params = canonical_flags({"target": "inf2", "model_type": "transformer", "optlevel": 3})
    from_user = canonical_flags({}, "--optlevel 3 --model-type transformer --target inf2")
    mixed = canonical_flags({"optlevel": 3}, "-O1 --target=inf2 --model-type=transformer")
    assert from_params == from_user == mixed == "--target=inf2 --model-type=transformer --optlevel=3"


def test_ours_replace_the_users() -> None:
    user = ("--model-type=generic --auto-cast=all --auto-cast-type=fp16 --disable-mixed-precision-accumulation "
            "-lnc 2 -O2")
    ours = {"model_type": "transformer", "auto_cast": "matmult", "auto_cast_type": "bf16",
            "mixed_precision_accumulation": True, "lnc": 1, "optlevel": 3}
    assert canonical_flags(ours, user) == ("--model-type=transformer --auto-cast=matmult --auto-cast-type=bf16 "
                                           "--logical-nc-config=1 --optlevel=3 "
                                           "--enable-mixed-precision-accumulation")


def test_fast_loading_off_removes_the_users_flag() -> None:
    assert canonical_flags({"fast_loading": False}, "--enable-fast-loading-neuron-binaries") == ""
    assert canonical_flags({}, "--enable-fast-loading-neuron-binaries") == "--enable-fast-loading-neuron-binaries"


def test_user_only_flags_follow_in_their_order() -> None:
    user = ("--enable-saturate-infinity --distribution-strategy llm-training "
            "--tensorizer-options='--enable-ccop-compute-overlap --cc-pipeline-tiling-factor=2' "
            "--internal-hlo2tensorizer-options=\"--verify-hlo=true\"")
    assert canonical_flags({"model_type": "transformer"}, user) == "--model-type=transformer " + user


def test_wrapper_flags_go_last() -> None:
    user = ("--retry_failed_compilation --cache_dir=/fsx/cache --enable-saturate-infinity "
            "--log_level=INFO -O1 --no_cache")
    assert canonical_flags({"model_type": "transformer"}, user) == (
        "--model-type=transformer --optlevel=1 --enable-saturate-infinity "
        "--retry_failed_compilation --cache_dir=/fsx/cache --log_level=INFO --no_cache")


def test_duplicates_collapse_the_last_one_winning() -> None:
    # As seen in real compile caches: the same flag appended twice by two layers of scripts.
    assert canonical_flags({}, "--model-type=transformer --model-type=transformer") == "--model-type=transformer"
    assert canonical_flags({}, "--model-type=generic --model-type transformer") == "--model-type=transformer"
    assert canonical_flags({}, "--enable-mixed-precision-accumulation --disable-mixed-precision-accumulation") \
        == "--disable-mixed-precision-accumulation"
    assert canonical_flags({}, "--x=1 --x=2 --x=1") == "--x=2 --x=1"
    assert canonical_flags({}, "--enable-saturate-infinity --enable-saturate-infinity") == "--enable-saturate-infinity"
    assert canonical_flags({}, "--cache_dir=/a --cache_dir=/b") == "--cache_dir=/b"


def test_whitespace_does_not_matter() -> None:
    assert canonical_flags({"optlevel": 2}, "  --enable-saturate-infinity\t\n --no_cache ") == \
        "--optlevel=2 --enable-saturate-infinity --no_cache"


def test_broken_exported_flags_are_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="unterminated quote"):
        canonical_flags({}, "--tensorizer-options='--a")
    with pytest.raises(InvalidConfigError, match="unterminated quote"):
        canonical_flags({}, "--a=\"x y")
    assert canonical_flags({}, "--x=\"it's\"") == "--x=\"it's\""
    with pytest.raises(InvalidConfigError, match="no value"):
        canonical_flags({}, "--model-type")


# --- check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("params, match", [
    ({"lnc": 2, "target": "trn1"}, "NCC_EARG001"),
    ({"lnc": 2, "target": "trn1n"}, "set target to trn2 or lnc to 1"),
    ({"lnc": 2, "target": "inf2"}, "NCC_EARG001"),
    ({"lnc": 2}, "target is unset"),
    ({"auto_cast_type": "bf16"}, "set auto_cast to matmult or all"),
    ({"auto_cast": "none", "auto_cast_type": "fp8_e4m3"}, "set auto_cast to matmult or all"),
    ({"path": "native", "auto_cast": "matmult"}, "keeps the compiler's auto-cast at none"),
    ({"path": "native", "auto_cast": "all", "auto_cast_type": "bf16"}, "auto-cast at none"),
    ({"path": "native", "optlevel": 2}, "use native_opt_level"),
    ({"path": "native", "lnc": 1}, "use logical_nc_config"),
    ({"path": "native", "target": "trn2"}, "detects the target itself"),
    ({"path": "native", "batches_per_execution": 2}, "MpDeviceLoader"),
    ({"path": "native", "precision": "xla_use_bf16"}, "only the xla path reads"),
    ({"path": "native", "data_parallel": True}, "data_parallel does not apply to the native path: traced inference"),
    ({"path": "native", "dynamic_batch": False}, "dynamic_batch does not apply to the native path"),
    ({"native_opt_level": 2}, "use optlevel"),
    ({"path": "xla", "logical_nc_config": 2}, "use lnc"),
    ({"path": "eager"}, "path 'eager' is not one of xla, native"),
    ({"model_type": "bert"}, "model_type 'bert' is not one of generic, transformer, unet-inference"),
    ({"optlevel": 4}, "optlevel 4 is not one of 1, 2, 3"),
    ({"optlevel": "3"}, "optlevel '3' is not one of"),
    ({"optlevel": 3.0}, "optlevel 3.0 is not one of"),
    ({"optlevel": True}, "optlevel True is not one of"),
    ({"target": "trn3"}, "target 'trn3' is not one of trn1, trn1n, inf2, trn2"),
    ({"auto_cast": "matmul"}, "spelled matmult"),
    ({"auto_cast": "all", "auto_cast_type": "int8"}, "auto_cast_type 'int8'"),
    ({"lnc": 4, "target": "trn2"}, "lnc 4 is not one of 1, 2"),
    ({"path": "native", "logical_nc_config": 8}, "logical_nc_config 8"),
    ({"path": "native", "native_opt_level": 0}, "native_opt_level 0"),
    ({"precision": "fp16"}, "precision 'fp16' is not one of"),
    ({"fast_loading": "yes"}, "fast_loading must be true or false"),
    ({"stochastic_rounding": 1}, "stochastic_rounding must be true or false"),
    ({"batches_per_execution": 0}, "batches_per_execution must be an integer of at least 1"),
    ({"batch_size": 0}, "batch_size must be an integer"),
    ({"num_workers": -1}, "num_workers must be an integer of at least 0"),
    ({"xla_flags": "--foo"}, "unknown parameter"),
])
def test_check_rejects(target: NeuronTarget, params: dict, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        target.check(params)
    with pytest.raises(InvalidConfigError):
        target.plan(params)


@pytest.mark.parametrize("params", [
    {},
    {"lnc": 2, "target": "trn2"},
    {"lnc": 1, "target": "trn1"},
    {"auto_cast": "matmult", "auto_cast_type": "tf32"},
    {"auto_cast": "none"},
    {"path": "native", "auto_cast": "none", "logical_nc_config": 2, "native_opt_level": 3},
    {"path": "xla", "precision": "xla_use_bf16", "stochastic_rounding": True},
    {"optlevel": None, "auto_cast_type": None},
])
def test_check_accepts(target: NeuronTarget, params: dict) -> None:
    target.check(params)


# --- built-in spaces -----------------------------------------------------------------------


@pytest.mark.parametrize("name", SPACES)
def test_space_defaults_and_known_good_plan(target: NeuronTarget, name: str) -> None:
    space = builtin_space(name)
    assert space.target == "neuron"
    configs = [space.defaults(), *space.known_good]
    for config in configs:
        target.check(config)
        plan = target.plan(config)
        assert plan.target == "neuron"
    # The baseline is the script's own behaviour: nothing but the platform is fixed.
    assert space.defaults() == space.fixed


@pytest.mark.parametrize("name, platform", [("neuron-trn1", "trn1"), ("neuron-inf2", "inf2")])
def test_xla_spaces_hold_the_published_winner(target: NeuronTarget, name: str, platform: str) -> None:
    space = builtin_space(name)
    assert space.fixed == {"target": platform}
    # With stochastic rounding, as the Neuron docs pair it with a bf16 cast.
    winner = {"model_type": "transformer", "optlevel": 3, "precision": "bf16_model", "stochastic_rounding": True,
              "target": platform}
    assert winner in space.known_good
    plan = target.plan(winner)
    assert plan.env == {"NEURON_CC_FLAGS": f"--target={platform} --model-type=transformer --optlevel=3",
                        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"}
    assert plan.knobs.model_dtype == "bfloat16"
    assert space.parameters["batches_per_execution"].choices == (1, 2, 5, 10)
    assert space.parameters["batch_size"].choices == (4, 8, 16, 32)


def test_xla_space_only_offers_auto_cast_type_with_auto_cast() -> None:
    space = builtin_space("neuron-trn1")
    with pytest.raises(InvalidConfigError, match="only applies when auto_cast"):
        space.validate({"auto_cast": "none", "auto_cast_type": "bf16"})
    assert space.validate({"auto_cast": "all", "auto_cast_type": "bf16"})["auto_cast_type"] == "bf16"


def test_trn2_space_is_the_native_path(target: NeuronTarget) -> None:
    space = builtin_space("neuron-trn2")
    assert space.fixed == {"path": "native"}
    assert "auto_cast" not in space.parameters
    assert "xla_use_bf16" not in space.parameters["precision"].choices
    assert not set(space.parameters) & {"optlevel", "target", "lnc", "batches_per_execution"}
    config = space.validate({"native_opt_level": 1, "logical_nc_config": 2})
    assert target.plan(config).env == {"NEURON_COMPILER_OPT_LEVEL": "-O1", "NEURON_LOGICAL_NC_CONFIG": "2",
                                       "NEURON_CC_FLAGS": "--logical-nc-config=2"}


@pytest.mark.parametrize("name", SPACES)
def test_every_space_choice_passes_check(target: NeuronTarget, name: str) -> None:
    space = builtin_space(name)
    for param in space.free_parameters:
        for choice in param.choices or ():
            config = {**space.fixed, param.name: choice}
            if param.name == "auto_cast_type":
                config["auto_cast"] = "matmult"
            target.check(space.validate(config))


# --- platforms -----------------------------------------------------------------------------


@pytest.mark.parametrize("platform, space", [
    ("trn1", "neuron-trn1"), ("trn1n", "neuron-trn1"), ("inf2", "neuron-inf2"),
    ("trn2", "neuron-trn2"), ("trn3", "neuron-trn2"), ("trn1.32xlarge", "neuron-trn1"),
    ("trn1n.32xlarge", "neuron-trn1"), ("inf2.xlarge", "neuron-inf2"), ("trn2.48xlarge", "neuron-trn2"),
    ("trn2u.48xlarge", "neuron-trn2"), ("TRN2", "neuron-trn2"),
])
def test_space_name(target: NeuronTarget, platform: str, space: str) -> None:
    assert target.space_name(platform) == space


def test_unknown_platform(target: NeuronTarget) -> None:
    with pytest.raises(TargetError, match="choose one of trn1, trn1n, inf2, trn2, trn3"):
        target.space_name("inf1")


def test_platform_from_env(target: NeuronTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_NEURON_PLATFORM", "inf2")
    assert target.space_name() == "neuron-inf2"
    assert target.default_space().platform == "inf2"
    monkeypatch.setenv("AUTOTUNE_NEURON_PLATFORM", "p5")
    with pytest.raises(TargetError, match="AUTOTUNE_NEURON_PLATFORM"):
        target.space_name()


def test_platform_from_instance_type(target: NeuronTarget, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path) -> None:
    monkeypatch.delenv("AUTOTUNE_NEURON_PLATFORM", raising=False)
    product = tmp_path / "product_name"
    monkeypatch.delenv("AUTOTUNE_INSTANCE_TYPE", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # on EC2 the metadata service would answer first
    monkeypatch.setattr(host, "DMI_PRODUCT_NAME", product)
    product.write_text("trn2.48xlarge\n")
    assert target.space_name() == "neuron-trn2"
    product.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    assert target.space_name() == "neuron-trn1"
    product.unlink()
    assert target.space_name() == "neuron-trn1"


# --- presence and versions ------------------------------------------------------------------


def test_neuron_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neuron_platform.os.path, "exists", lambda p: False)
    monkeypatch.setattr(neuron_platform, "find_spec", lambda name: None)
    assert neuron_present() is False
    assert NeuronTarget().available() is False
    monkeypatch.setattr(neuron_platform, "find_spec", lambda name: object() if name == "torch_neuronx" else None)
    assert neuron_present() is True
    monkeypatch.setattr(neuron_platform, "find_spec", lambda name: None)
    monkeypatch.setattr(neuron_platform.os.path, "exists", lambda p: p == "/dev/neuron0")
    assert neuron_present() is True


def test_neuron_present_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from autotune.targets.neuron import neuron_present; neuron_present(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_versions_lists_installed_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"torch": "2.9.0", "torch-neuronx": "2.9.0.2.11.19912", "neuronx-cc": "2.21.33363.0"}
    monkeypatch.setattr(neuron_target, "package_version", installed.get)
    assert NeuronTarget().versions() == installed


# --- caches --------------------------------------------------------------------------------


def test_xla_cache_is_a_directory_under_the_root() -> None:
    assert compile_cache_env("/cache", "2.21.33363.0", "xla") == {
        "NEURON_COMPILE_CACHE_URL": "/cache/neuron-compile-cache"}
    # The XLA cache keys by compiler version itself (neuronxcc-<version>/): no version needed.
    assert compile_cache_env("/cache/", None, "xla") == {"NEURON_COMPILE_CACHE_URL": "/cache/neuron-compile-cache"}


def test_xla_cache_passes_an_exported_s3_url_through() -> None:
    assert compile_cache_env("/cache", "2.21.33363.0", "xla", "s3://bucket/neuron-cache") == {
        "NEURON_COMPILE_CACHE_URL": "s3://bucket/neuron-cache"}
    # An exported directory is replaced: the cache root's own is what autotune lists and prunes.
    assert compile_cache_env("/cache", None, "xla", "/var/tmp/neuron-compile-cache") == {
        "NEURON_COMPILE_CACHE_URL": "/cache/neuron-compile-cache"}


def test_an_exported_s3_cache_reaches_the_trial_unchanged(tmp_path) -> None:
    script = tmp_path / "serve.py"
    script.write_text("print('ok')\n")
    url = "s3://fleet-bucket/neuron/cache?region=us-east-1"
    user_env = {"PATH": "/usr/bin", "NEURON_COMPILE_CACHE_URL": url}
    prepared = prepare_trial(script, target="neuron", platform="inf2", sets={"optlevel": 3},
                             base_env=user_env, cache_root=str(tmp_path / "cache"))
    env = trial_env(prepared.plan, user_env)
    assert env["NEURON_COMPILE_CACHE_URL"] == url
    assert env["NEURON_CC_FLAGS"] == "--target=inf2 --optlevel=3"
    # The native path does not read it; its NEFF cache stays under the cache root.
    prepared = prepare_trial(script, target="neuron", platform="trn2", sets={"native_opt_level": 2},
                             base_env=user_env, cache_root=str(tmp_path / "cache"))
    assert prepared.plan.env["TORCH_NEURONX_NEFF_CACHE_DIR"].startswith(str(tmp_path / "cache"))


def test_native_cache_is_one_directory_per_compiler_version() -> None:
    assert compile_cache_env("/cache", "2.21.33363.0+1b8a7b4c", "native") == {
        "TORCH_NEURONX_NEFF_CACHE_DIR": "/cache/neff-2.21.33363.0+1b8a7b4c"}
    assert compile_cache_env("/cache", "2.22.1.0", "native") != compile_cache_env("/cache", "2.21.1.0", "native")
    assert compile_cache_env("/cache", None, "native") == {"TORCH_NEURONX_NEFF_CACHE_DIR": "/cache/neff-unknown"}
    assert compile_cache_env("/cache", "2/../x", "native") == {"TORCH_NEURONX_NEFF_CACHE_DIR": "/cache/neff-2_.._x"}


def test_cache_rejections() -> None:
    with pytest.raises(InvalidConfigError, match="path 'eager'"):
        compile_cache_env("/cache", None, "eager")


# --- flags that follow the installed compiler ------------------------------------------------


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch):
    """Stands in for an installed neuronx-cc (and torch-neuronx) of the given versions: none can be
    installed here."""

    def install(version: str, neuronx: str | None = None) -> None:
        versions = {"neuronx-cc": version, "torch-neuronx": neuronx}
        monkeypatch.setattr(neuron_target, "package_version", versions.get)

    return install


@pytest.mark.parametrize("version, default, other, defaults", [
    # Before Neuron 2.27 off is the default and has no flag: setting it off is the baseline's run.
    ("2.20.2831.0", False, "--enable-mixed-precision-accumulation",
     "--auto-cast=matmult and mixed-precision accumulation off"),
    ("2.22.1234.0+0a1b2c3d", True, "--disable-mixed-precision-accumulation",
     "--auto-cast=none and mixed-precision accumulation on"),
])
def test_accumulation_unset_is_the_compilers_default(target: NeuronTarget, compiler, version: str, default: bool,
                                                     other: str, defaults: str) -> None:
    compiler(version)
    space = load_trial_space(target, "neuron-inf2")
    assert space.validate({"mixed_precision_accumulation": default}) == {"target": "inf2"}
    assert target.plan(space.validate({"mixed_precision_accumulation": not default})).compiler_flags == \
        f"--target=inf2 {other}"
    baseline = target.plan(space.defaults())
    assert baseline.compiler_flags == "--target=inf2"
    assert f"compiler flags for neuronx-cc {version}: --target=inf2; unset, its defaults are {defaults}" in baseline.notes


def test_an_old_compiler_is_offered_only_what_it_knows(target: NeuronTarget, compiler) -> None:
    compiler("2.5.0.28")
    space = load_trial_space(target, "neuron-trn1")
    assert "mixed_precision_accumulation" not in space.parameters  # 2.13.66.0 brought the flag
    assert "unet-inference" not in space.parameters["model_type"].choices  # 2.6.0.19 brought it
    assert "fp8_e4m3" in space.parameters["auto_cast_type"].choices and "trn1n" in space.parameters["target"].choices
    compiler("2.4.0.21")
    old = load_trial_space(target, "neuron-trn1")
    assert "fp8_e4m3" not in old.parameters["auto_cast_type"].choices and "trn1n" not in old.parameters["target"].choices


def test_without_a_compiler_the_space_is_as_written(target: NeuronTarget, compiler) -> None:
    compiler("")
    assert load_trial_space(target, "neuron-inf2").parameters == builtin_space("neuron-inf2").parameters


@pytest.mark.parametrize("neuronx, offered", [
    ("2.7.0.2.9.9114", ("xla_use_bf16", "xla_downcast_bf16")),  # torch-xla 2.7 still reads them
    ("2.9.0.2.11.19912", ()),
])
def test_the_xla_bf16_variables_only_where_torch_xla_reads_them(target: NeuronTarget, compiler, neuronx: str,
                                                                 offered: tuple[str, ...]) -> None:
    compiler("2.22.1234.0", neuronx)
    for name in ("neuron-trn1", "neuron-inf2"):
        choices = load_trial_space(target, name).parameters["precision"].choices
        assert tuple(c for c in choices if c.startswith("xla_")) == offered
        assert {"fp32", "bf16_model", "bf16_autocast"} <= set(choices)
