"""Search-space files: YAML read with the line of every key, so that an error names the file and
the line; the built-in files ship as ``autotune.search_spaces``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import InvalidConfigError, SpaceError
from autotune.space.parameters import Parameter
from autotune.space.search_space import SearchSpace

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
