"""``NEURON_CC_FLAGS``: the parameters of the Neuron target and the one spelling of each flag.

Equal configurations must produce byte-identical flag strings (the compile cache keys on the
string as given), so every flag is written in one canonical form and order here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from autotune.errors import InvalidConfigError
from autotune.records import PROCESSES_PARAM

if TYPE_CHECKING:
    from autotune.space import ParamValue

FLAGS_ENV = "NEURON_CC_FLAGS"

PATHS = ("xla", "native")
MODEL_TYPES = ("generic", "transformer", "unet-inference")
OPT_LEVELS = (1, 2, 3)
COMPILER_TARGETS = ("trn1", "trn1n", "inf2", "trn2")
AUTO_CASTS = ("none", "matmult", "all")
AUTO_CAST_TYPES = ("bf16", "fp16", "tf32", "fp8_e4m3")
LNC_VALUES = (1, 2)
PRECISIONS = ("fp32", "bf16_model", "bf16_autocast", "xla_use_bf16", "xla_downcast_bf16")
#: The precisions that are an env var of torch-xla, deprecated since torch-xla 2.5, and the variable.
XLA_BF16_VARS = {"xla_use_bf16": "XLA_USE_BF16", "xla_downcast_bf16": "XLA_DOWNCAST_BF16"}

#: Parameters that only mean something on one path, with what to use on the other instead.
XLA_ONLY: dict[str, str] = {
    "optlevel": "use native_opt_level (NEURON_COMPILER_OPT_LEVEL) on the native path",
    "target": "the native path detects the target itself",
    "lnc": "use logical_nc_config (NEURON_LOGICAL_NC_CONFIG) on the native path",
    "batches_per_execution": "MpDeviceLoader is an XLA-path tool; torch.compile decides the graphs "
                             "on the native path",
    "data_parallel": "traced inference (torch_neuronx.trace) is tuned on the xla path",
    "dynamic_batch": "traced inference (torch_neuronx.trace) is tuned on the xla path",
}
NATIVE_ONLY: dict[str, str] = {
    "native_opt_level": "use optlevel (--optlevel in NEURON_CC_FLAGS) on the xla path",
    "logical_nc_config": "use lnc (--logical-nc-config in NEURON_CC_FLAGS) on the xla path",
}
_SHARED_PARAMS = (
    "path", "batch_size", "num_workers", "precision", "model_type", "auto_cast", "auto_cast_type",
    "mixed_precision_accumulation", "fast_loading", "stochastic_rounding",
)
KNOWN_PARAMS = frozenset((*_SHARED_PARAMS, *XLA_ONLY, *NATIVE_ONLY, PROCESSES_PARAM))
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
_BOOL_PARAMS = ("mixed_precision_accumulation", "fast_loading", "stochastic_rounding", "data_parallel",
                "dynamic_batch")
#: Integer parameters and their smallest value.
_INT_PARAMS = {"batch_size": 1, "num_workers": 0, "batches_per_execution": 1}

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


def _render(key: str, value: ParamValue | None) -> str | None:
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
# torch_neuronx.trace's compiler_args


def merge_compiler_args(configured: str, script_args: str | list[str] | None) -> tuple[list[str], list[str]]:
    """``torch_neuronx.trace``'s ``compiler_args`` with the compiler settings of the configuration's
    ``NEURON_CC_FLAGS`` (``configured``; its other flags are the XLA path's) in place of the
    script's own, and what of the script's they replaced (``"--optlevel=1 -> --optlevel=3"``).

    trace hands ``compiler_args`` (a string or a list of strings) to neuronx-cc and reads no
    ``NEURON_CC_FLAGS``, so this is the only way a tuned flag reaches a traced model. The result is
    the canonical string, split as a shell would: the settings in canonical order and spelling,
    then the script's other flags as it wrote them."""
    if script_args is None:
        script = ""
    elif isinstance(script_args, str):
        script = script_args
    else:
        script = " ".join(shlex.quote(str(arg)) for arg in script_args)
    ours = {flag.key: flag.value for flag in parse_user_flags(configured) if flag.kind == "known"}
    replaced = []
    for flag in parse_user_flags(script):
        if flag.kind == "known" and flag.key in ours and _render(flag.key, flag.value) != _render(flag.key, ours[flag.key]):
            replaced.append(f"{_render(flag.key, flag.value)} -> {_render(flag.key, ours[flag.key]) or 'nothing'}")
    return shlex.split(canonical_flags(ours, script)), replaced


# ---------------------------------------------------------------------------------------------
# What each neuronx-cc version knows, and its defaults

#: Settings a neuronx-cc older than the version given does not know ("Neuron Compiler release
#: notes": 2.4.0.21 ``--target=inf2``; 2.5.0.28 ``--target=trn1n`` and ``fp8_e4m3``; 2.6.0.19
#: ``unet-inference``; 2.13.66.0 ``--enable-mixed-precision-accumulation``), and the flag that
#: came with the new defaults (:data:`NEW_DEFAULTS_SINCE`).
SINCE: dict[tuple[str, Any], tuple[int, ...]] = {
    ("target", "inf2"): (2, 4, 0, 21),
    ("target", "trn1n"): (2, 5, 0, 28),
    ("auto_cast_type", "fp8_e4m3"): (2, 5, 0, 28),
    ("model_type", "unet-inference"): (2, 6, 0, 19),
    ("mixed_precision_accumulation", True): (2, 13, 66, 0),
    ("mixed_precision_accumulation", False): (2, 21),
}
#: The first neuronx-cc with Neuron 2.27's defaults (``--auto-cast=none``, mixed-precision
#: accumulation on, ``--disable-mixed-precision-accumulation`` new): the compiler after
#: 2.20.2831.0, whose notes announce the change for a later release, Neuron 2.26 having shipped
#: no new compiler. (The 2.27 notes print its version as 2.15.54.0, which cannot follow 2.20.)
NEW_DEFAULTS_SINCE = (2, 21)


#: The torch-neuronx (its version starts with torch's) from which torch-xla no longer reads
#: XLA_USE_BF16 and XLA_DOWNCAST_BF16 ("Migration From XLA_USE_BF16/XLA_DOWNCAST_BF16": removed in
#: torch-xla 2.8; "Neuron Release 2.24 will be the last release to support" them).
XLA_BF16_VARS_UNTIL = (2, 8)


def compiler_version(text: str | None) -> tuple[int, ...] | None:
    """``"2.21.33363.0+1b8a7b4c"`` as ``(2, 21, 33363, 0)``; ``None`` for no (or no readable) version."""
    match = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(part) for part in match.group(0).split(".")) if match else None


def known_to(version: tuple[int, ...] | None, name: str, value: ParamValue | None) -> bool:
    """Whether neuronx-cc ``version`` knows the setting ``name=value`` (an unknown version: assumed)."""
    since = SINCE.get((name, value))
    return since is None or version is None or version >= since


def compiler_defaults(version: tuple[int, ...]) -> dict[str, Any]:
    """What neuronx-cc ``version`` does with ``--auto-cast`` and mixed-precision accumulation unset."""
    new = version >= NEW_DEFAULTS_SINCE
    return {"auto_cast": "none" if new else "matmult", "mixed_precision_accumulation": new}
