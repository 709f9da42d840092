"""Search spaces: one YAML file per target and platform under ``search_spaces/``.

A file looks like::

    target: xla
    description: torch-xla on any PJRT device
    parameters:
      batch_size:
        type: int
        choices: [8, 16, 32, 64]
        default: null          # null keeps the script's own value: the baseline
      auto_cast_type:
        type: categorical
        choices: [bf16, fp16, tf32, fp8_e4m3]
        when: {auto_cast: [matmult, all]}   # active only for these values of auto_cast
    fixed: {target: trn1}      # parameters every trial of this space gets
    known_good:                # enqueued right after the baseline
      - {precision: bf16_model, model_type: transformer, optlevel: 3}

Errors in a file name the file, the line and the problem.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from autotune.errors import InvalidConfigError, SpaceError

ParamType = Literal["categorical", "int", "float", "bool"]
_TYPES = ("categorical", "int", "float", "bool")
_PARAM_KEYS = {"type", "choices", "low", "high", "step", "log", "default", "when", "description"}
_TOP_KEYS = {"target", "platform", "description", "parameters", "fixed", "known_good"}


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings remember the line of each key."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)  # YAML merge keys (<<: *anchor)
    mapping = _LinedDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise SpaceError(f"{loader.name}: line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    mapping.line = node.start_mark.line + 1
    return mapping


class _LinedDict(dict):
    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int] = {}
        self.line = 0


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class Parameter:
    name: str
    type: ParamType
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    #: ``None`` means "whatever the script does": the baseline's value.
    default: Any = None
    #: Active only when each named parameter has one of the listed values.
    when: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    description: str = ""

    def coerce(self, value: Any) -> Any:
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
        if self.low is not None and self.high is not None and not (self.low <= value <= self.high):
            raise InvalidConfigError(
                f"parameter {self.name!r}: {value!r} is out of range [{_fmt(self.low)}, {_fmt(self.high)}]"
            )
        return value

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


@dataclass
class SearchSpace:
    target: str
    parameters: dict[str, Parameter]
    platform: str | None = None
    description: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    known_good: list[dict[str, Any]] = field(default_factory=list)
    source: str = "<memory>"

    def validate(self, params: dict[str, Any], *, allow_inactive: bool = False) -> dict[str, Any]:
        """Check and coerce ``params``; returns the canonical configuration.

        Canonical means: every value of its parameter's type, no ``None`` (unset) values, the
        space's fixed parameters included, keys sorted. Equal configurations compare equal.
        """
        out: dict[str, Any] = {}
        for name, value in params.items():
            if name in self.fixed and name in self.parameters and \
                    self.parameters[name].coerce(value) != self.fixed[name]:
                raise InvalidConfigError(
                    f"parameter {name!r} is fixed to {self.fixed[name]!r} here ({self.source}); "
                    f"remove {name}={value!r} or use another search space")
        for name, value in {**params, **self.fixed}.items():
            if name not in self.parameters:
                known = ", ".join(sorted(self.parameters)) or "none"
                raise InvalidConfigError(
                    f"unknown parameter {name!r} for target {self.target}"
                    f"{' (' + self.platform + ')' if self.platform else ''}; known parameters: {known}"
                )
            coerced = self.parameters[name].coerce(value)
            if coerced is not None:
                out[name] = coerced
        if not allow_inactive:
            for name in list(out):
                param = self.parameters[name]
                if not param.is_active(out):
                    cond = " and ".join(
                        f"{k} is one of {', '.join(str(v) for v in vs)}" for k, vs in param.when.items()
                    )
                    raise InvalidConfigError(
                        f"parameter {name!r} only applies when {cond}; remove it or change "
                        f"{', '.join(param.when)}"
                    )
        return dict(sorted(out.items()))

    def defaults(self) -> dict[str, Any]:
        """The baseline: every parameter at its default (usually the script's own behaviour)."""
        base = {n: p.default for n, p in self.parameters.items() if p.default is not None}
        base.update(self.fixed)
        active = {n: v for n, v in base.items() if self.parameters[n].is_active(base)}
        return self.validate(active)

    def restrict(self, fixed: dict[str, Any]) -> SearchSpace:
        """A copy of this space with some parameters fixed (``--set``); ``null`` fixes "unset"."""
        for name in fixed:
            if name not in self.parameters:
                self.validate({name: fixed[name]})  # raises the unknown-parameter message
        values = {k: self.parameters[k].coerce(v) for k, v in fixed.items()}
        for k, v in values.items():
            if k in self.fixed and v != self.fixed[k]:
                raise InvalidConfigError(f"parameter {k!r} is fixed to {self.fixed[k]!r} in {self.source}")
        narrowed = dict(self.parameters)
        for k, v in values.items():
            if v is None:  # keep the script's own value: the parameter leaves the space
                narrowed.pop(k)
        new_fixed = {**self.fixed, **{k: v for k, v in values.items() if v is not None}}
        space = SearchSpace(self.target, narrowed, self.platform, self.description, {}, [], self.source)
        space.fixed = space.validate(new_fixed, allow_inactive=True)
        space.known_good = list(self.known_good)
        return space

    @property
    def free_parameters(self) -> list[Parameter]:
        return [p for n, p in self.parameters.items() if n not in self.fixed]

    def in_dependency_order(self) -> list[Parameter]:
        """The parameters, each after those its ``when`` names (the order a study asks them in)."""
        placed: list[Parameter] = []
        names: set[str] = set()
        pending = list(self.parameters.values())
        while pending:
            progress = False
            for p in list(pending):
                if all(dep in names for dep in p.when):
                    placed.append(p)
                    names.add(p.name)
                    pending.remove(p)
                    progress = True
            if not progress:
                raise SpaceError(f"{self.source}: the 'when' conditions of "
                                 f"{', '.join(p.name for p in pending)} depend on each other in a cycle")
        return placed


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpaceError(f"cannot read search space {path}: {exc.strerror}") from None
    return parse_space(text, str(path))


def parse_space(text: str, source: str = "<memory>") -> SearchSpace:
    try:
        loader = _LineLoader(text)
        loader.name = source
        try:
            doc = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise SpaceError(f"{source}: {line}not valid YAML ({exc.problem})") from None
    if not isinstance(doc, dict):
        raise SpaceError(f"{source}: a search space is a mapping with 'target' and 'parameters'")

    def fail(where: _LinedDict | None, key: Any, problem: str) -> SpaceError:
        line = (where.lines.get(key) or where.line) if isinstance(where, _LinedDict) else None
        return SpaceError(f"{source}: {'line ' + str(line) + ': ' if line else ''}{problem}")

    for key in doc:
        if key not in _TOP_KEYS:
            raise fail(doc, key, f"unknown key {key!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    if not isinstance(doc.get("target"), str):
        raise fail(doc, "target", "'target' must name a target (xla, inductor, neuron)")
    raw_params = doc.get("parameters")
    if not isinstance(raw_params, dict) or not raw_params:
        raise fail(doc, "parameters", "'parameters' must be a non-empty mapping")

    params: dict[str, Parameter] = {}
    for name, spec in raw_params.items():
        if not isinstance(spec, dict):
            raise fail(raw_params, name, f"parameter {name!r} must be a mapping with a 'type'")
        for key in spec:
            if key not in _PARAM_KEYS:
                raise fail(spec, key, f"parameter {name!r}: unknown key {key!r}")
        ptype = spec.get("type")
        if ptype not in _TYPES:
            raise fail(spec, "type", f"parameter {name!r}: type must be one of {', '.join(_TYPES)}")
        choices = spec.get("choices")
        low, high = spec.get("low"), spec.get("high")
        if ptype == "bool":
            choices = [False, True] if choices is None else choices
        if choices is not None:
            if not isinstance(choices, list) or not choices:
                raise fail(spec, "choices", f"parameter {name!r}: 'choices' must be a non-empty list")
            if len(set(map(repr, choices))) != len(choices):
                raise fail(spec, "choices", f"parameter {name!r}: 'choices' has duplicates")
            if low is not None or high is not None:
                raise fail(spec, "low", f"parameter {name!r}: give either 'choices' or 'low'/'high', not both")
        elif ptype in ("int", "float"):
            if not isinstance(low, (int, float)) or not isinstance(high, (int, float)) or low > high:
                raise fail(spec, "type", f"parameter {name!r}: a numeric range needs 'low' <= 'high'")
            if spec.get("log") and low <= 0:
                raise fail(spec, "log", f"parameter {name!r}: a log range needs 'low' > 0")
        else:
            raise fail(spec, "type", f"parameter {name!r}: a categorical parameter needs 'choices'")
        when = spec.get("when") or {}
        if not isinstance(when, dict):
            raise fail(spec, "when", f"parameter {name!r}: 'when' maps parameter names to allowed values")
        params[name] = Parameter(
            name=name, type=ptype,
            choices=tuple(choices) if choices is not None else None,
            low=low, high=high, step=spec.get("step"), log=bool(spec.get("log", False)),
            default=spec.get("default"),
            when={k: tuple(v if isinstance(v, list) else [v]) for k, v in when.items()},
            description=str(spec.get("description", "")),
        )
        if params[name].default is not None:
            try:
                params[name].coerce(params[name].default)
            except InvalidConfigError as exc:
                raise fail(spec, "default", f"default: {exc}") from None

    for name, p in params.items():
        for other, allowed in p.when.items():
            if other not in params:
                raise fail(raw_params[name], "when", f"parameter {name!r}: 'when' names unknown parameter {other!r}")
            for value in allowed:
                try:
                    params[other].coerce(value)
                except InvalidConfigError:
                    raise fail(raw_params[name], "when",
                               f"parameter {name!r}: {other}={value!r} can never happen") from None
            if other == name:
                raise fail(raw_params[name], "when", f"parameter {name!r}: 'when' cannot name itself")

    space = SearchSpace(target=doc["target"], parameters=params, platform=doc.get("platform"),
                        description=str(doc.get("description", "")), source=source)
    for section in ("fixed",):
        raw = doc.get(section) or {}
        if not isinstance(raw, dict):
            raise fail(doc, section, f"'{section}' must be a mapping of parameter to value")
        try:
            space.fixed = space.validate(raw, allow_inactive=True)
        except InvalidConfigError as exc:
            raise fail(doc, section, f"{section}: {exc}") from None
    known = doc.get("known_good") or []
    if not isinstance(known, list):
        raise fail(doc, "known_good", "'known_good' must be a list of configurations")
    for i, config in enumerate(known):
        try:
            space.known_good.append(space.validate(dict(config)))
        except (InvalidConfigError, TypeError, ValueError) as exc:
            raise fail(doc, "known_good", f"known_good[{i}]: {exc}") from None
    try:
        space.defaults()
    except InvalidConfigError as exc:
        named = re.search(r"parameter '([^']+)'", str(exc))
        where, key = (raw_params, named.group(1)) if named and named.group(1) in raw_params else (doc, "parameters")
        raise fail(where, key, f"the defaults contradict each other: {exc}") from None
    return space


def builtin_space_path(name: str) -> Path:
    """Path of a search space shipped with autotune (``xla``, ``neuron-trn1``, ...)."""
    root = _spaces_root()
    path = root / f"{name}.yaml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in root.glob("*.yaml")))
        raise SpaceError(f"no built-in search space {name!r}; built-in spaces: {names}")
    return path


def builtin_space(name: str) -> SearchSpace:
    return load_space(builtin_space_path(name))


def _spaces_root() -> Path:
    # The repository's ``search_spaces/`` folder is installed as ``autotune.search_spaces``.
    from importlib.resources import files

    return Path(str(files("autotune.search_spaces")))


def _to_bool(value: Any) -> bool:
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


def _match_choice(value: Any, choices: tuple[Any, ...]) -> Any:
    """``--set`` gives strings; find the choice they spell (``3`` for ``"3"``)."""
    if value in choices:
        return value
    for choice in choices:
        if str(choice) == str(value) or (isinstance(choice, bool) and str(choice).lower() == str(value).lower()):
            return choice
    return value


def _fmt(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() and not math.isinf(x) else str(x))
