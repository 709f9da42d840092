"""Which Neuron configurations can run at all, decided from the parameters alone: a configuration
rejected here fails as ``invalid_config`` without a compile, which on Neuron takes minutes."""

from __future__ import annotations

from typing import Any, Mapping

from autotune.errors import InvalidConfigError
from autotune.targets.neuron.flags import (
    _BOOL_PARAMS,
    _CHOICES,
    _INT_PARAMS,
    KNOWN_PARAMS,
    NATIVE_ONLY,
    XLA_BF16_VARS,
    XLA_ONLY,
)


def check_configuration(params: Mapping[str, Any]) -> None:
    """Reject what neuronx-cc or the runtime cannot run, before anything starts: an unknown
    parameter, a value outside its choices, a setting of the other path, and the combinations
    the compiler refuses (each error names the fix)."""
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
        if given.get("precision") in XLA_BF16_VARS:
            raise InvalidConfigError(
                f"precision {given['precision']} sets {XLA_BF16_VARS[given['precision']]}, which only the xla "
                "path reads; use bf16_model or bf16_autocast on the native path"
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
