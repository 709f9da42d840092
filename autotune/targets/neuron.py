"""AWS Neuron (Trainium, Inferentia2) through torch-neuronx, on two paths.

* ``path: xla`` (Trn1, Inf2; torch-neuronx 2.9 with torch-xla): the model runs on the lazy XLA
  device, ``neuronx-cc`` compiles each graph with the flags in ``NEURON_CC_FLAGS``, and
  ``MpDeviceLoader(batches_per_execution=N)`` decides where graphs are cut.
* ``path: native`` (Trn2, Trn3; torch-neuronx 2.13+): the model runs on the eager ``neuron``
  device and ``torch.compile(backend="neuron")`` compiles regions. The level comes from
  ``NEURON_COMPILER_OPT_LEVEL``, the logical core size from ``NEURON_LOGICAL_NC_CONFIG``; the
  compiler's auto-cast stays ``none`` (bf16 comes from the model or ``torch.autocast("neuron")``),
  and the remaining compiler flags still travel in ``NEURON_CC_FLAGS``.

No machine of this project has a Neuron device or compiler, so everything here is written from the
AWS Neuron documentation and tested by contract (exact env and flag strings). Where each spelling
comes from (Neuron documentation page names):

* "Neuron Compiler CLI Reference Guide (neuronx-cc)": ``--target`` (inf2, trn1, trn1n, trn2),
  ``--model-type`` (generic, transformer, unet-inference), ``--auto-cast`` (none, matmult, all),
  ``--auto-cast-type`` (bf16, fp16, tf32, fp8_e4m3), ``--logical-nc-config`` or ``-lnc`` (1, 2;
  trn2 only), ``--optlevel`` or ``-O`` (1, 2, 3; default 2), ``--enable-mixed-precision-accumulation``,
  ``--enable-fast-loading-neuron-binaries``; the synopsis order there is the canonical order here.
* "Neuron Compiler release notes" (2.6.0.19: ``unet-inference``; 2.5.0.28: ``--target=trn1n``) and
  "AWS Neuron SDK 2.27.0: Neuron Compiler release notes": ``--auto-cast`` defaults to ``none``
  (``matmult`` before) and mixed-precision accumulation is on by default, with the new
  ``--disable-mixed-precision-accumulation`` to turn it off.
* "NCC_EARG001" (compiler error codes): an LNC the target does not support, ``lnc=2`` on trn1.
* "Logical NeuronCore configuration": ``NEURON_LOGICAL_NC_CONFIG``, which must equal the compiler's
  ``--logical-nc-config``.
* "PyTorch NeuronX Environment Variables": ``NEURON_CC_FLAGS``, ``NEURON_COMPILE_CACHE_URL``.
* "Neuron Persistent Cache": ``--cache_dir=``, ``--no_cache``, ``--retry_failed_compilation`` and
  ``--log_level=`` are read by ``neuron_cc_wrapper`` and never reach the compiler; the default cache
  ``/var/tmp/neuron-compile-cache``; ``s3://`` cache URLs; ``--cache_dir`` wins over the env var.
* "Migration From XLA_USE_BF16/XLA_DOWNCAST_BF16": those variables are deprecated (torch-xla 2.5),
  turn stochastic rounding on by themselves, and ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1`` is the
  replacement.
* "torch.compile backend reference" and "TorchNeuron environment variables":
  ``backend="neuron"``, ``torch.autocast(device_type="neuron")``, ``NEURON_COMPILER_OPT_LEVEL``
  (written ``-O<n>``, as torch-neuronx reads it), ``TORCH_NEURONX_NEFF_CACHE_DIR`` (default
  ``/tmp/neff_cache``).

Spelling choices: valued flags are written ``--long-name=value``, the long names of the CLI
reference (``--optlevel=3``, not ``-O3``; ``--logical-nc-config=2``, not ``-lnc 2``), because one
uniform form is what makes equal configurations produce byte-identical ``NEURON_CC_FLAGS`` and so
hit the same compile-cache entry (its key hashes the flag string as given).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from autotune.errors import InvalidConfigError, TargetError
from autotune.records import CompileSpec, TrialPlan
from autotune.targets.base import Target, common_knobs, package_version

FLAGS_ENV = "NEURON_CC_FLAGS"

PATHS = ("xla", "native")
MODEL_TYPES = ("generic", "transformer", "unet-inference")
OPT_LEVELS = (1, 2, 3)
COMPILER_TARGETS = ("trn1", "trn1n", "inf2", "trn2")
AUTO_CASTS = ("none", "matmult", "all")
AUTO_CAST_TYPES = ("bf16", "fp16", "tf32", "fp8_e4m3")
LNC_VALUES = (1, 2)
PRECISIONS = ("fp32", "bf16_model", "bf16_autocast", "xla_use_bf16")

#: Parameters that only mean something on one path, with what to use on the other instead.
XLA_ONLY: dict[str, str] = {
    "optlevel": "use native_opt_level (NEURON_COMPILER_OPT_LEVEL) on the native path",
    "target": "the native path detects the target itself",
    "lnc": "use logical_nc_config (NEURON_LOGICAL_NC_CONFIG) on the native path",
    "batches_per_execution": "MpDeviceLoader is an XLA-path tool; torch.compile decides the graphs "
                             "on the native path",
}
NATIVE_ONLY: dict[str, str] = {
    "native_opt_level": "use optlevel (--optlevel in NEURON_CC_FLAGS) on the xla path",
    "logical_nc_config": "use lnc (--logical-nc-config in NEURON_CC_FLAGS) on the xla path",
}
_SHARED_PARAMS = (
    "path", "batch_size", "num_workers", "precision", "model_type", "auto_cast", "auto_cast_type",
    "mixed_precision_accumulation", "fast_loading", "stochastic_rounding",
)
KNOWN_PARAMS = frozenset((*_SHARED_PARAMS, *XLA_ONLY, *NATIVE_ONLY))
_CHOICES: dict[str, tuple[Any, ...]] = {
    "path": PATHS,
    "model_type": MODEL_TYPES,
    "optlevel": OPT_LEVELS,
    "native_opt_level": OPT_LEVELS,
    "target": COMPILER_TARGETS,
    "auto_cast": AUTO_CASTS,
    "auto_cast_type": AUTO_CAST_TYPES,
    "lnc": LNC_VALUES,
    "logical_nc_config": LNC_VALUES,
    "precision": PRECISIONS,
}
_BOOL_PARAMS = ("mixed_precision_accumulation", "fast_loading", "stochastic_rounding")
#: Integer parameters and their smallest value.
_INT_PARAMS = {"batch_size": 1, "num_workers": 0, "batches_per_execution": 1}

#: Platform families and the built-in space of each.
PLATFORM_SPACES: dict[str, str] = {
    "trn1": "neuron-trn1", "trn1n": "neuron-trn1", "inf2": "neuron-inf2",
    "trn2": "neuron-trn2", "trn3": "neuron-trn2",
}
PLATFORM_ENV = "AUTOTUNE_NEURON_PLATFORM"
# On EC2 (Nitro) the DMI product name is the instance type, e.g. "trn1.32xlarge": reading it is a
# file read, where asking neuron-ls or the instance metadata service would take a process or a
# network round trip.
_DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
_PLATFORM_FAMILY = re.compile(r"^(trn1n|trn1|inf2|trn2|trn3)")


def neuron_present() -> bool:
    """Whether this machine has a Neuron device or torch-neuronx; cheap, and never imports torch."""
    if os.path.exists("/dev/neuron0"):
        return True
    try:
        return find_spec("torch_neuronx") is not None
    except (ImportError, ValueError):
        return False


def platform_family(platform: str) -> str | None:
    """``trn1``, ``trn1n``, ``inf2``, ``trn2`` or ``trn3`` for a family or instance type, else None."""
    match = _PLATFORM_FAMILY.match(platform.strip().lower())
    return match.group(1) if match else None


def detect_platform() -> str:
    """The Neuron platform family of this machine: ``AUTOTUNE_NEURON_PLATFORM``, else the EC2
    instance type where the DMI table names one, else ``trn1``."""
    configured = os.environ.get(PLATFORM_ENV)
    if configured:
        family = platform_family(configured)
        if family is None:
            raise TargetError(
                f"{PLATFORM_ENV}={configured!r} is not a Neuron platform; "
                f"set it to one of {', '.join(PLATFORM_SPACES)}"
            )
        return family
    try:
        product = _DMI_PRODUCT_NAME.read_text(errors="replace")
    except OSError:
        product = ""
    return platform_family(product) or "trn1"


# ---------------------------------------------------------------------------------------------
# NEURON_CC_FLAGS


@dataclass(frozen=True)
class CompilerFlag:
    """One compiler setting: the spelling we write and every spelling a user may have written."""

    key: str
    canonical: str
    aliases: tuple[str, ...]
    takes_value: bool = True


#: The compiler settings this module writes, in the canonical order of NEURON_CC_FLAGS (the
#: synopsis order of the CLI reference).
COMPILER_FLAGS: tuple[CompilerFlag, ...] = (
    CompilerFlag("target", "--target", ("--target",)),
    CompilerFlag("model_type", "--model-type", ("--model-type",)),
    CompilerFlag("auto_cast", "--auto-cast", ("--auto-cast",)),
    CompilerFlag("auto_cast_type", "--auto-cast-type", ("--auto-cast-type",)),
    # "--lnc" is not in the CLI reference's synopsis but is what its NCC_EARG001 page shows.
    CompilerFlag("lnc", "--logical-nc-config", ("--logical-nc-config", "-lnc", "--lnc")),
    # "--O" is how earlier versions of the CLI reference spelled the option.
    CompilerFlag("optlevel", "--optlevel", ("--optlevel", "-O", "--O")),
    CompilerFlag("mixed_precision_accumulation", "--enable-mixed-precision-accumulation",
                 ("--enable-mixed-precision-accumulation", "--disable-mixed-precision-accumulation"),
                 takes_value=False),
    CompilerFlag("fast_loading", "--enable-fast-loading-neuron-binaries",
                 ("--enable-fast-loading-neuron-binaries",), takes_value=False),
)
_FLAG_BY_KEY = {flag.key: flag for flag in COMPILER_FLAGS}
_DISABLE_MIXED_PRECISION_ACCUMULATION = "--disable-mixed-precision-accumulation"

#: Space parameters that set a compiler setting, and the setting. lnc and logical_nc_config are
#: the same compiler option; the runtime variable that must match it is set beside (see plan).
PARAM_FLAG_KEYS: dict[str, str] = {
    "target": "target",
    "model_type": "model_type",
    "auto_cast": "auto_cast",
    "auto_cast_type": "auto_cast_type",
    "lnc": "lnc",
    "logical_nc_config": "lnc",
    "optlevel": "optlevel",
    "mixed_precision_accumulation": "mixed_precision_accumulation",
    "fast_loading": "fast_loading",
}
#: Parameters that set a compiler setting through another env var: a user's flag for that setting
#: is dropped from NEURON_CC_FLAGS so that it cannot override ours.
_CLAIMED_ELSEWHERE = {"native_opt_level": "optlevel"}

#: Flags read by neuron_cc_wrapper (the XLA path's compile cache), never by the compiler; whether a
#: flag takes a value.
WRAPPER_FLAGS: dict[str, bool] = {
    "--cache_dir": True, "--no_cache": False, "--retry_failed_compilation": False, "--log_level": True,
}

# A token runs to the next unquoted whitespace; quotes are kept as written, so that the string we
# hand back splits (the way torch-neuronx splits it) into the same arguments the user's did.
_TOKEN = re.compile(r"""(?:[^\s'"]+|'[^']*'|"[^"]*")+""")
_GLUED_OPTLEVEL = re.compile(r"^-O(\d+)$")


@dataclass(frozen=True)
class ExportedFlag:
    """One flag of an exported ``NEURON_CC_FLAGS``, as :func:`parse_user_flags` understood it."""

    #: A compiler setting of COMPILER_FLAGS, a flag of the cache wrapper, or any other flag.
    kind: Literal["known", "wrapper", "other"]
    #: What two occurrences of the same flag share: the setting's key, or the flag's name.
    key: str
    #: The value of a known setting (a string, or a bool for on/off settings).
    value: Any = None
    #: The user's text, for wrapper and other flags.
    text: str = ""


def _tokens(flags: str) -> list[str]:
    # Whatever no token covers is a quote that never closes.
    if _TOKEN.sub("", flags).strip():
        raise InvalidConfigError(
            f"{FLAGS_ENV} has an unterminated quote: {flags!r}; fix the exported {FLAGS_ENV}"
        )
    return _TOKEN.findall(flags)


def _match_known(token: str) -> tuple[CompilerFlag, Any] | None:
    """The known setting ``token`` starts, and its value (``None``: the value is the next token)."""
    glued = _GLUED_OPTLEVEL.match(token)
    if glued:
        return _FLAG_BY_KEY["optlevel"], glued.group(1)
    for flag in COMPILER_FLAGS:
        for alias in flag.aliases:
            if not flag.takes_value and token == alias:
                return flag, alias != _DISABLE_MIXED_PRECISION_ACCUMULATION
            if flag.takes_value and token == alias:
                return flag, None
            if flag.takes_value and token.startswith(alias + "="):
                return flag, token[len(alias) + 1:]
    return None


def parse_user_flags(flags: str) -> list[ExportedFlag]:
    """Split an exported ``NEURON_CC_FLAGS`` into flags, recognising every spelling of ours."""
    tokens = _tokens(flags)
    parsed: list[ExportedFlag] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        known = _match_known(token)
        if known is not None:
            flag, value = known
            if value is None:
                if i == len(tokens):
                    raise InvalidConfigError(
                        f"{FLAGS_ENV} ends with {token} and no value; give it one or remove it"
                    )
                value, i = tokens[i], i + 1
            parsed.append(ExportedFlag("known", flag.key, value=value))
            continue
        name = token.split("=", 1)[0]
        group = [token]
        if name in WRAPPER_FLAGS:
            if WRAPPER_FLAGS[name] and "=" not in token and i < len(tokens):
                group.append(tokens[i])
                i += 1
            parsed.append(ExportedFlag("wrapper", name, text=" ".join(group)))
            continue
        # An option we do not know: the words up to the next option are its values.
        while i < len(tokens) and not tokens[i].startswith("-"):
            group.append(tokens[i])
            i += 1
        parsed.append(ExportedFlag("other", name, text=" ".join(group)))
    return parsed


def _render(key: str, value: Any) -> str | None:
    flag = _FLAG_BY_KEY[key]
    if key == "mixed_precision_accumulation":
        return flag.canonical if value else _DISABLE_MIXED_PRECISION_ACCUMULATION
    if key == "fast_loading":
        # There is no flag that turns fast loading off: off is the flag's absence.
        return flag.canonical if value else None
    return f"{flag.canonical}={value}"


def _last_occurrences(flags: list[ExportedFlag],
                      same: Callable[[ExportedFlag], str]) -> list[ExportedFlag]:
    """``flags`` with only the last of each group of equal ones (``same`` says which), in order.

    The compiler and its wrapper let the right-most occurrence of an option win, so keeping the
    last one keeps the meaning.
    """
    last = {same(flag): index for index, flag in enumerate(flags)}
    return [flag for index, flag in enumerate(flags) if last[same(flag)] == index]


def canonical_flags(params: Mapping[str, Any], user_flags: str = "") -> str:
    """The ``NEURON_CC_FLAGS`` string for ``params`` merged into the flags the user exported.

    One fixed order and no duplicates, so that equal configurations give byte-identical strings:
    the compile cache hashes the string as given. Every compiler setting this module knows is
    written in its one canonical spelling at its canonical place, whoever set it; ours replace
    the user's, whatever spelling the user used (``-O3``, ``-lnc 2``). Flags this module does not
    know follow in the user's order, exactly as written (only exact repeats are dropped: a
    repeated option might legitimately take several values). The wrapper's own flags
    (``--cache_dir=`` ...) come last. Unset (``None``) parameters write nothing.
    """
    ours: dict[str, Any] = {}
    for name, key in PARAM_FLAG_KEYS.items():
        if params.get(name) is not None:
            ours[key] = params[name]
    claimed = set(ours) | {
        key for name, key in _CLAIMED_ELSEWHERE.items() if params.get(name) is not None
    }

    parsed = parse_user_flags(user_flags)
    settings: dict[str, Any] = {}
    for flag in parsed:
        if flag.kind == "known" and flag.key not in claimed:
            settings[flag.key] = flag.value
    settings.update(ours)
    others = _last_occurrences([f for f in parsed if f.kind == "other"], lambda f: f.text)
    wrapper = _last_occurrences([f for f in parsed if f.kind == "wrapper"], lambda f: f.key)

    rendered = [_render(flag.key, settings[flag.key]) for flag in COMPILER_FLAGS if flag.key in settings]
    return " ".join([r for r in rendered if r] + [f.text for f in others] + [f.text for f in wrapper])


# ---------------------------------------------------------------------------------------------
# Caches and devices


def compile_cache_env(cache_root: str, compiler_version: str | None, path: str) -> dict[str, str]:
    """The env vars that put a trial's compiled artifacts under ``cache_root``.

    XLA path: ``NEURON_COMPILE_CACHE_URL`` is ``<cache_root>/neuron-compile-cache`` (the cache
    makes its own ``neuronxcc-<version>/`` level, so ``compiler_version`` is not needed), or an
    ``s3://`` root unchanged. A ``--cache_dir=`` in ``NEURON_CC_FLAGS`` would still win over it.
    Native path: ``TORCH_NEURONX_NEFF_CACHE_DIR`` is ``<cache_root>/neff-<compiler version>``,
    because that cache's key does not include the compiler version and two versions must never
    share entries.
    """
    if path == "xla":
        if cache_root.startswith("s3://"):
            return {"NEURON_COMPILE_CACHE_URL": cache_root}
        return {"NEURON_COMPILE_CACHE_URL": os.path.join(cache_root, "neuron-compile-cache")}
    if path == "native":
        if cache_root.startswith("s3://"):
            raise InvalidConfigError(
                f"the native path's NEFF cache is a directory (local or shared, e.g. NFS), not "
                f"{cache_root!r}; use a directory as the cache root for the native path"
            )
        version = re.sub(r"[^\w.+-]", "_", compiler_version) if compiler_version else "unknown"
        return {"TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(cache_root, f"neff-{version}")}
    raise InvalidConfigError(f"path {path!r} is not one of {', '.join(PATHS)}")


# ---------------------------------------------------------------------------------------------
# The target


class NeuronTarget(Target):
    name = "neuron"
    spaces = ("neuron-trn1", "neuron-inf2", "neuron-trn2")

    def space_name(self, platform: str | None = None) -> str:
        """trn1/trn1n -> neuron-trn1, inf2 -> neuron-inf2, trn2/trn3 -> neuron-trn2 (instance
        types such as ``trn1.32xlarge`` work too); ``None`` detects this machine's platform."""
        family = platform_family(platform) if platform is not None else detect_platform()
        if family is None:
            raise TargetError(
                f"unknown Neuron platform {platform!r}; choose one of {', '.join(PLATFORM_SPACES)}"
            )
        return PLATFORM_SPACES[family]

    def check(self, params: Mapping[str, Any]) -> None:
        given = {k: v for k, v in params.items() if v is not None}
        unknown = sorted(set(given) - KNOWN_PARAMS)
        if unknown:
            raise InvalidConfigError(
                f"unknown parameter(s) {', '.join(unknown)} for target neuron; "
                f"known parameters: {', '.join(sorted(KNOWN_PARAMS))}"
            )
        for name, choices in _CHOICES.items():
            value = given.get(name)
            # bool is an int and 3.0 == 3: both would pass a plain ``in``.
            if value is not None and (type(value) is not type(choices[0]) or value not in choices):
                hint = "; the value is spelled matmult" if value == "matmul" else ""
                raise InvalidConfigError(
                    f"{name} {value!r} is not one of {', '.join(map(str, choices))}{hint}"
                )
        for name in _BOOL_PARAMS:
            if name in given and not isinstance(given[name], bool):
                raise InvalidConfigError(f"{name} must be true or false, not {given[name]!r}")
        for name, low in _INT_PARAMS.items():
            value = given.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise InvalidConfigError(f"{name} must be an integer of at least {low}, not {value!r}")

        path = given.get("path", "xla")
        wrong_path = XLA_ONLY if path == "native" else NATIVE_ONLY
        for name, instead in wrong_path.items():
            if name in given:
                raise InvalidConfigError(
                    f"{name} does not apply to the {path} path: {instead}; remove {name} or change path"
                )
        if path == "native":
            if given.get("precision") == "xla_use_bf16":
                raise InvalidConfigError(
                    "precision xla_use_bf16 sets XLA_USE_BF16, which only the xla path reads; "
                    "use bf16_model or bf16_autocast on the native path"
                )
            if given.get("auto_cast", "none") != "none":
                raise InvalidConfigError(
                    f"auto_cast {given['auto_cast']!r}: the native path keeps the compiler's auto-cast "
                    "at none; remove auto_cast and use precision bf16_model or bf16_autocast instead"
                )
        if "auto_cast_type" in given and given.get("auto_cast", "none") == "none":
            raise InvalidConfigError(
                f"auto_cast_type {given['auto_cast_type']!r} only applies when the compiler auto-casts; "
                "set auto_cast to matmult or all, or remove auto_cast_type"
            )
        if given.get("lnc") == 2 and given.get("target") != "trn2":
            raise InvalidConfigError(
                f"lnc 2 needs target trn2 (target is {given.get('target', 'unset')}; neuronx-cc "
                "fails with NCC_EARG001 otherwise); set target to trn2 or lnc to 1"
            )

    def plan(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> TrialPlan:
        self.check(params)
        base_env = base_env or {}
        native = params.get("path", "xla") == "native"
        env: dict[str, str] = {}
        notes: list[str] = []
        knobs = common_knobs(params)

        if native:
            knobs.compile = CompileSpec(backend="neuron")
            if params.get("native_opt_level") is not None:
                env["NEURON_COMPILER_OPT_LEVEL"] = f"-O{params['native_opt_level']}"
        else:
            knobs.lazy_device = True
            knobs.batches_per_execution = params.get("batches_per_execution")

        precision = params.get("precision")
        if precision == "bf16_model":
            knobs.model_dtype = "bfloat16"
        elif precision == "bf16_autocast":
            knobs.autocast_device, knobs.autocast_dtype = ("neuron" if native else "xla"), "bfloat16"
        elif precision == "xla_use_bf16":
            env["XLA_USE_BF16"] = "1"
            notes.append("XLA_USE_BF16 is deprecated since torch-neuronx 2.5 (torch-xla 2.5); "
                         "prefer precision bf16_model or bf16_autocast")
            if params.get("stochastic_rounding") is None:
                notes.append("XLA_USE_BF16 also turns on stochastic rounding unless "
                             "NEURON_RT_STOCHASTIC_ROUNDING_EN is set")

        if params.get("stochastic_rounding") is not None:
            env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1" if params["stochastic_rounding"] else "0"
        lnc = params.get("logical_nc_config") if native else params.get("lnc")
        if lnc is not None:
            # The runtime must group cores the way the compiler sharded the graph ("Logical
            # NeuronCore configuration"), so the flag and the env var are always set together.
            env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)

        user_flags = base_env.get(FLAGS_ENV, "")
        flags = canonical_flags(params, user_flags)
        if flags:
            env[FLAGS_ENV] = flags
        notes.extend(self._flag_notes(params, native, user_flags))
        return TrialPlan(target=self.name, params=dict(params), env=env, flags_env=FLAGS_ENV,
                         knobs=knobs, notes=notes)

    @staticmethod
    def _flag_notes(params: Mapping[str, Any], native: bool, user_flags: str) -> list[str]:
        """What a user should know about the compiler flags this plan ends up with."""
        notes: list[str] = []
        user = parse_user_flags(user_flags)
        user_keys = {f.key for f in user if f.kind == "known"}
        if not native and params.get("auto_cast") is None and "auto_cast" not in user_keys:
            notes.append("--auto-cast is left at the compiler's default, which is none since Neuron "
                         "2.27 (matmult before): set auto_cast to pin it across SDK versions")
        if params.get("mixed_precision_accumulation") is False:
            notes.append("--disable-mixed-precision-accumulation exists since Neuron 2.27, where "
                         "mixed-precision accumulation became the default")
        if native and params.get("native_opt_level") is not None and "optlevel" in user_keys:
            notes.append("the optimization level in the exported NEURON_CC_FLAGS was dropped: "
                         "native_opt_level sets it through NEURON_COMPILER_OPT_LEVEL")
        wrapper = [f.key for f in user if f.kind == "wrapper"]
        if native and wrapper:
            notes.append(f"{', '.join(wrapper)} in NEURON_CC_FLAGS are read by the XLA path's "
                         "neuron_cc_wrapper; on the native path they reach neuronx-cc itself")
        return notes

    def cache_env(self, root: str, params: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
        from autotune.targets.base import package_version

        path = params.get("path", "xla")
        return compile_cache_env(root, package_version("neuronx-cc"), path), []

    def available(self) -> bool:
        return neuron_present()

    def compile_cache_persists(self) -> bool:
        return True

    def versions(self) -> dict[str, str]:
        return {k: v for k in ("torch", "torch-neuronx", "torch-xla", "neuronx-cc")
                if (v := package_version(k))}
