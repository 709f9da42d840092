"""A parameter of a search space: its type, its values, when it applies, and how a value given as
text (``--set batch_size=16``) becomes one of its values."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.errors import InvalidConfigError

ParamType = Literal["categorical", "int", "float", "bool"]
#: A value a parameter takes: one of its choices, a number of its range, or what ``--set`` gave
#: coerced to its type. ``None`` in a configuration is "unset": the script's own.
ParamValue = bool | int | float | str


@dataclass(frozen=True)
class Parameter:
    name: str
    type: ParamType
    choices: tuple[ParamValue, ...] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    #: ``None`` means "whatever the script does": the baseline's value.
    default: ParamValue | None = None
    #: Active only when each named parameter has one of the listed values.
    when: dict[str, tuple[ParamValue | None, ...]] = field(default_factory=dict)
    description: str = ""
    #: A flag of the script's own command line (``--batch_size``) that takes the value instead of
    #: the target's way of applying it (:class:`~autotune.records.ScriptFlag`).
    arg: str | None = None
    #: With ``arg``: applied the target's way (an interception, an env var) as well.
    intercept: bool = False
    #: What the script or its framework uses when the parameter is left unset, where that is
    #: known (XLA's own optimisation level): setting it to this value is the same run as leaving
    #: it unset, so a canonical configuration leaves it unset and the run is measured once.
    unset_is: ParamValue | None = None

    def same_as_unset(self, value: ParamValue | None) -> bool:
        """Whether ``value`` (coerced) is what leaving the parameter unset gives anyway."""
        return self.unset_is is not None and value == self.unset_is and type(value) is type(self.unset_is)

    def coerce(self, value: Any) -> ParamValue | None:
        """Turn a value (possibly a ``--set`` string) into this parameter's type, or raise."""
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none")
                             and not self._has_choice(value)):
            return None
        try:
            if self.type == "bool":
                value = _to_bool(value)
            elif self.type == "int":
                value = _to_int(value)
            elif self.type == "float":
                value = float(value)
            elif self.choices is not None:
                value = _match_choice(value, self.choices)
        except (TypeError, ValueError):
            raise InvalidConfigError(
                f"parameter {self.name!r}: {value!r} is not a valid {self.type}{self._allowed()}"
            ) from None
        if self.choices is not None and value not in self.choices:
            raise InvalidConfigError(f"parameter {self.name!r}: {value!r} is not allowed{self._allowed()}")
        if (self.low is not None and self.high is not None and isinstance(value, (int, float))
                and not (self.low <= value <= self.high)):
            raise InvalidConfigError(
                f"parameter {self.name!r}: {value!r} is out of range [{_fmt(self.low)}, {_fmt(self.high)}]"
            )
        return value

    @property
    def bounds(self) -> tuple[float, float]:
        """``(low, high)`` of a parameter given as a range (its file gives both, or it has choices)."""
        if self.low is None or self.high is None:
            raise ValueError(f"parameter {self.name!r} has choices, not a range")
        return self.low, self.high

    def _has_choice(self, value: str) -> bool:
        return self.choices is not None and value in self.choices

    def _allowed(self) -> str:
        if self.choices is not None:
            return "; choose one of " + ", ".join(str(c) for c in self.choices)
        if self.low is not None:
            return f"; the range is [{_fmt(self.low)}, {_fmt(self.high)}]"
        return ""

    def is_active(self, params: dict[str, Any]) -> bool:
        return all(params.get(other) in allowed for other, allowed in self.when.items())


#: A flag as a script's argument parser spells it: ``--batch_size``, ``--batch-size``, ``-b``.
FLAG = re.compile(r"^(-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9_.-]*)$")


def check_flag(name: str, flag: str) -> str:
    """``flag`` if it can be a flag of a script's command line, else an :class:`InvalidConfigError`."""
    if not FLAG.match(flag):
        raise InvalidConfigError(f"parameter {name!r}: {flag!r} is not a flag of a script's command line; "
                                 "write it as the script's argument parser does, e.g. --batch_size or -b")
    return flag


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(value)


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)  # "08" is eight
        except ValueError:
            return int(value.strip(), 0)  # "0x0a", "0b1010"
    return int(value)


def _match_choice(value: object, choices: tuple[ParamValue, ...]) -> object:
    """``--set`` gives strings; find the choice they spell (``3`` for ``"3"``)."""
    if value in choices:
        return value
    for choice in choices:
        if str(choice) == str(value) or (isinstance(choice, bool) and str(choice).lower() == str(value).lower()):
            return choice
    return value


def _fmt(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() and not math.isinf(x) else str(x))
