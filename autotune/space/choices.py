"""Several values of one parameter given at once: ``--set batch_size=32,64`` narrows the space to
those values and the study chooses among them, where ``--set batch_size=32`` fixes the parameter.
A user narrows a space this way without writing a search-space file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autotune.errors import InvalidConfigError
from autotune.space.parameters import Parameter, ParamValue
from autotune.space.search_space import SearchSpace


def with_choices(space: SearchSpace, sets: dict[str, Any]) -> tuple[SearchSpace, dict[str, Any]]:
    """``space`` with each parameter that ``sets`` gives several values (``"32,64"``, or a list from
    the Python API) narrowed to them, and ``sets`` less those; a parameter given one value stays in
    ``sets``, to be fixed."""
    parameters = dict(space.parameters)
    rest: dict[str, Any] = {}
    for name, value in sets.items():
        param = space.parameters.get(name)
        texts = _several(param, value) if param is not None else None
        if param is None or texts is None:
            rest[name] = value
            continue
        if name in space.fixed:
            raise InvalidConfigError(f"--set {name}={_shown(value)}: {name} is fixed to {space.fixed[name]!r} in "
                                     f"{space.source}")
        values: list[ParamValue] = []
        for text in texts:
            coerced = param.coerce(text)  # the parameter's own message for a value it cannot take
            if coerced is None:
                raise InvalidConfigError(f"--set {name}={_shown(value)}: a list holds values of {name}; "
                                         f"leaving it to the script is --set {name}=null alone")
            if coerced not in values:
                values.append(coerced)
        if len(values) == 1:
            rest[name] = values[0]
            continue
        parameters[name] = _narrowed(param, values)
    if parameters == space.parameters:
        return space, rest
    return replace(space, parameters=parameters), rest


def _several(param: Parameter, value: object) -> list[object] | None:
    """The values of a list, or ``None`` for one value (a choice that itself holds a comma is one)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str) or "," not in value or \
            (param.choices is not None and value in [str(c) for c in param.choices]):
        return None
    return [v.strip() for v in value.split(",")]


def _narrowed(param: Parameter, values: list[ParamValue]) -> Parameter:
    """``param`` as a choice among ``values``. Its default stays where it is one of them; else the first
    given is the baseline's value (the script's own is not among what the user asked for)."""
    default = param.default if param.default in values else values[0]
    return replace(param, choices=tuple(values), low=None, high=None, step=None, log=False, default=default)


def _shown(value: object) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
