"""Search-space files: YAML read with the line of every key, so that an error names the file and
the line; the built-in files ship as ``autotune.search_spaces``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.errors import InvalidConfigError, SpaceError
from autotune.space.parameters import FLAG, Parameter
from autotune.space.search_space import SearchSpace

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

_TYPES = ("categorical", "int", "float", "bool")
#: A parameter's name: an identifier, as the environment variable it becomes must be.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _At(ValueError):
    """A problem at ``path`` (keys from the mapping being validated), reported with that key's line."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


class ParameterSpec(BaseModel):
    """One parameter as a file writes it (``parameters: {NAME: ...}``)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    type: str
    choices: list[Any] | None = None
    low: int | float | None = None
    high: int | float | None = None
    step: int | float | None = None
    log: bool = False
    #: ``null`` keeps the script's own value (the baseline).
    default: Any = None
    #: ``{other: [values]}`` (or one value): active only when each named parameter has one of them.
    when: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    #: A flag of the script's own command line that takes the value (``arg: --batch_size``), in
    #: place of the target's way of applying it; ``intercept: true`` keeps that way too.
    arg: str | None = None
    intercept: bool = False
    #: The value the script or its framework uses when the parameter is unset (see
    #: :attr:`~autotune.space.parameters.Parameter.unset_is`).
    unset_is: Any = None

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: object) -> object:
        if value not in _TYPES:
            raise _At(("type",), f"type must be one of {', '.join(_TYPES)}")
        return value

    @field_validator("arg")
    @classmethod
    def _a_flag(cls, arg: str | None) -> str | None:
        if arg is not None and not FLAG.match(arg):
            raise _At(("arg",), f"{arg!r} is not a flag of a script's command line; write it as the script's "
                                "argument parser does, e.g. --batch_size or -b")
        return arg

    @model_validator(mode="after")
    def _values(self) -> ParameterSpec:
        if self.intercept and self.arg is None:
            raise _At(("intercept",), "'intercept' keeps the target's way of applying a parameter given as "
                                      "'arg'; it needs 'arg'")
        if self.type == "bool" and self.choices is None:
            self.choices = [False, True]
        if self.choices is not None:
            if not self.choices:
                raise _At(("choices",), "'choices' must be a non-empty list")
            if len(set(map(repr, self.choices))) != len(self.choices):
                raise _At(("choices",), "'choices' has duplicates")
            if self.low is not None or self.high is not None:
                raise _At(("low",), "give either 'choices' or 'low'/'high', not both")
        elif self.type == "categorical":
            raise _At(("type",), "a categorical parameter needs 'choices'")
        else:
            if self.low is None or self.high is None or self.low > self.high:
                raise _At(("type",), "a numeric range needs 'low' <= 'high'")
            if self.log and self.low <= 0:
                raise _At(("log",), "a log range needs 'low' > 0")
        if self.step is not None:
            # Optuna refuses these only when the parameter is first asked for, mid-study.
            if self.low is None:
                raise _At(("step",), "'step' applies to a numeric range ('low'/'high'); remove it")
            if not self.step > 0:
                raise _At(("step",), f"'step' must be positive, not {self.step!r}")
            if self.log:
                raise _At(("step",), "'step' and 'log' cannot be combined; remove one of them")
            if self.type == "int" and self.step != int(self.step):
                raise _At(("step",), f"an int range's 'step' must be a whole number, not {self.step!r}")
        return self

    def parameter(self, name: str) -> Parameter:
        return Parameter(name=name, type=self.type,  # type: ignore[arg-type]  # checked by _known_type
                         choices=tuple(self.choices) if self.choices is not None else None,
                         low=self.low, high=self.high, step=self.step, log=self.log, default=self.default,
                         when={k: tuple(v if isinstance(v, list) else [v]) for k, v in self.when.items()},
                         description=self.description, arg=self.arg, intercept=self.intercept,
                         unset_is=self.unset_is)


class SpaceFile(BaseModel):
    """A search-space file. Validated with ``context={"source": PATH}``; :attr:`space` is the result."""

    model_config = ConfigDict(extra="forbid")

    target: str
    platform: str | None = None
    description: str = ""
    parameters: dict[str, ParameterSpec]
    fixed: dict[str, Any] = Field(default_factory=dict)
    known_good: list[dict[str, Any]] = Field(default_factory=list)
    _space: SearchSpace | None = PrivateAttr(default=None)

    @field_validator("parameters")
    @classmethod
    def _some(cls, parameters: dict[str, ParameterSpec]) -> dict[str, ParameterSpec]:
        if not parameters:
            raise _At((), "'parameters' must be a non-empty mapping")
        for name in parameters:
            # A name becomes an environment variable (AUTOTUNE_<NAME>) in best.env, which a shell sources.
            if not NAME.fullmatch(name):
                raise _At((name,), f"parameter name {name!r} must be letters, digits and underscores, "
                                   "not starting with a digit (e.g. batch_size)")
        return parameters

    @model_validator(mode="after")
    def _coherent(self, info: ValidationInfo) -> SpaceFile:
        """What no single parameter can check: defaults against choices, ``when`` against the
        other parameters, and the fixed, known-good and default configurations against the space."""
        params = {name: spec.parameter(name) for name, spec in self.parameters.items()}
        for name, p in list(params.items()):
            if p.default is not None:
                try:
                    p.coerce(p.default)
                except InvalidConfigError as exc:
                    raise _At(("parameters", name, "default"), f"default: {exc}") from None
            if p.unset_is is not None:
                at = ("parameters", name, "unset_is")
                if p.default is not None:
                    raise _At(at, f"parameter {name!r}: 'unset_is' says what leaving it unset gives, and its "
                                  f"default ({p.default!r}) always sets it; remove one of them")
                try:
                    params[name] = p = dataclasses.replace(p, unset_is=p.coerce(p.unset_is))
                except InvalidConfigError as exc:
                    raise _At(at, f"unset_is: {exc}") from None
            for other, allowed in p.when.items():
                at = ("parameters", name, "when")
                if other not in params:
                    raise _At(at, f"parameter {name!r}: 'when' names unknown parameter {other!r}")
                for value in allowed:
                    try:
                        params[other].coerce(value)
                    except InvalidConfigError:
                        raise _At(at, f"parameter {name!r}: {other}={value!r} can never happen") from None
                if other == name:
                    raise _At(at, f"parameter {name!r}: 'when' cannot name itself")
        space = SearchSpace(target=self.target, parameters=params, platform=self.platform,
                            description=self.description, source=(info.context or {}).get("source", "<memory>"))
        try:
            space.fixed = space.validate(self.fixed, allow_inactive=True, keep_unset_values=True)
        except InvalidConfigError as exc:
            raise _At(("fixed",), f"fixed: {exc}") from None
        for i, config in enumerate(self.known_good):
            try:
                space.known_good.append(space.validate(config))
            except InvalidConfigError as exc:
                raise _At(("known_good",), f"known_good[{i}]: {exc}") from None
        try:
            space.defaults()
        except InvalidConfigError as exc:
            named = re.search(r"parameter '([^']+)'", str(exc))
            at = ("parameters", named.group(1)) if named and named.group(1) in params else ("parameters",)
            raise _At(at, f"the defaults contradict each other: {exc}") from None
        self._space = space
        return self

    @property
    def space(self) -> SearchSpace:
        assert self._space is not None, "set by validation"
        return self._space


#: What a file gets when a section has the wrong shape, instead of pydantic's own words.
_SHAPES = {
    "target": "'target' must name a target (xla, inductor, neuron)",
    "parameters": "'parameters' must be a non-empty mapping",
    "fixed": "'fixed' must be a mapping of parameter to value",
    "known_good": "'known_good' must be a list of configurations",
}


def _space_error(error: ErrorDetails, doc: dict[str, Any], source: str) -> SpaceError:
    """A :class:`SpaceError` naming the file, the line and the problem of pydantic's ``error``."""
    # A list, not a tuple: the branches below index it by its length.
    loc: list[Any] = list(error["loc"])
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, _At):
        loc, problem = loc + list(cause.path), str(cause)
    elif error["type"] == "extra_forbidden":
        known = ParameterSpec.model_fields if len(loc) > 2 else SpaceFile.model_fields
        problem = f"unknown key {loc[-1]!r}" + ("" if len(loc) > 2 else f" (known: {', '.join(sorted(known))})")
    elif len(loc) == 2 and loc[0] == "parameters" and error["type"] == "model_type":
        problem = f"parameter {loc[1]!r} must be a mapping with a 'type'"
    elif loc[0] in _SHAPES and (len(loc) == 1 or loc[0] != "parameters"):
        loc, problem = loc[:1], _SHAPES[loc[0]]
    elif len(loc) > 2 and loc[2] in ("low", "high", "step"):
        loc, problem = loc[:3], f"'{loc[2]}' must be a number"
    else:
        problem = f"'{loc[2] if len(loc) > 2 else loc[-1]}': {error['msg'][:1].lower()}{error['msg'][1:]}"
    if len(loc) >= 2 and loc[0] == "parameters" and not problem.startswith(("parameter ", "default: ", "the ")):
        problem = f"parameter {loc[1]!r}: {problem}"
    line = _line(doc, loc)
    return SpaceError(f"{source}: {'line ' + str(line) + ': ' if line else ''}{problem}")


def _line(doc: object, loc: list[str | int]) -> int | None:
    """The line of the deepest key of ``loc`` that the file has (or of the mapping it is missing from)."""
    line, where = None, doc
    for key in loc:
        if not isinstance(where, _LinedDict):
            break
        line = where.lines.get(key, where.line)
        if key not in where:
            break
        where = where[key]
    return line


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


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpaceError(f"cannot read search space {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpaceError(f"search space {path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 YAML") from None
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
    try:
        spec = SpaceFile.model_validate(doc, context={"source": source})
    except ValidationError as exc:
        raise _space_error(exc.errors()[0], doc, source) from None
    return spec.space


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
    from importlib.resources import files

    return Path(str(files("autotune.search_spaces")))
