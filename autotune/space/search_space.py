"""A search space: the parameters of one target (and platform), those fixed for every trial, and
the known-good configurations; it checks configurations and makes them canonical."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from autotune.errors import InvalidConfigError, SpaceError
from autotune.records import PROCESSES_PARAM
from autotune.space.parameters import Parameter, check_flag


@dataclass
class SearchSpace:
    target: str
    parameters: dict[str, Parameter]
    platform: str | None = None
    description: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    known_good: list[dict[str, Any]] = field(default_factory=list)
    source: str = "<memory>"

    def validate(self, params: dict[str, Any], *, allow_inactive: bool = False,
                 keep_unset_values: bool = False) -> dict[str, Any]:
        """Check and coerce ``params``; returns the canonical configuration.

        Canonical means: every value of its parameter's type, no ``None`` (unset) values and no
        value that leaving its parameter unset gives anyway (``unset_is``; kept with
        ``keep_unset_values``), the space's fixed parameters included, keys sorted. Equal
        configurations, and configurations that are the same run, compare equal.
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
            param = self.parameters[name]
            coerced = param.coerce(value)
            if coerced is not None and (keep_unset_values or not param.same_as_unset(coerced)):
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
        narrowed = _without_unset_conditions(narrowed, set(self.parameters) - set(narrowed))
        new_fixed = {**self.fixed, **{k: v for k, v in values.items() if v is not None}}
        space = SearchSpace(self.target, narrowed, self.platform, self.description, {}, [], self.source)
        space.fixed = space.validate(new_fixed, allow_inactive=True, keep_unset_values=True)
        space.known_good = list(self.known_good)
        return space

    def same_as_script(self, values: dict[str, Any]) -> SearchSpace:
        """A copy of this space in which setting a parameter to the script's own value (``values``:
        what a run of the script showed it uses, its DataLoader's ``batch_size``) is the same run
        as leaving it unset (``unset_is``), so the two are measured once. Only a parameter left to
        the script by default, set the target's way (not a flag of the script's, which may mean
        something else), that knows no ``unset_is`` yet and that no ``when`` condition names
        learns its value; one the space cannot take is ignored."""
        named = {dep for p in self.parameters.values() for dep in p.when}
        parameters = dict(self.parameters)
        for name, value in values.items():
            p = parameters.get(name)
            if p is None or p.default is not None or p.arg is not None or p.unset_is is not None or name in named:
                continue
            try:
                coerced = p.coerce(value)
            except InvalidConfigError:
                continue
            if coerced is not None and (p.choices is None or coerced in p.choices):
                parameters[name] = replace(p, unset_is=coerced)
        if parameters == self.parameters:
            return self
        return SearchSpace(self.target, parameters, self.platform, self.description, dict(self.fixed),
                           list(self.known_good), self.source)

    def with_flags(self, flags: dict[str, str]) -> SearchSpace:
        """A copy of this space whose named parameters are given to the script as these flags of
        its own (``--arg batch_size=--batch_size``), in place of the target's way. What leaving such
        a parameter unset gives is the script's own default, which the space does not know."""
        parameters = dict(self.parameters)
        for name, flag in flags.items():
            if name == PROCESSES_PARAM:
                raise InvalidConfigError(f"--arg {name}={flag}: {name} is the process count of torchrun, "
                                         "which starts the script; it cannot be a flag of the script")
            if name not in parameters:
                known = ", ".join(sorted(parameters)) or "none"
                raise InvalidConfigError(f"--arg {name}={flag}: unknown parameter {name!r} for target "
                                         f"{self.target}; known parameters: {known} (a parameter of the "
                                         "script's alone is declared in a search-space file)")
            parameters[name] = replace(parameters[name], arg=check_flag(name, flag), unset_is=None)
        return SearchSpace(self.target, parameters, self.platform, self.description, dict(self.fixed),
                           list(self.known_good), self.source)

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


def _without_unset_conditions(parameters: dict[str, Parameter], unset: set[str]) -> dict[str, Parameter]:
    """``parameters`` once those in ``unset`` have left the space for good (held at the script's
    own value): a condition on one of them holds where it allows the unset value, and is dropped;
    a parameter whose condition does not allow it can never be active, and leaves too (and so on,
    for the parameters that depend on it)."""
    out = dict(parameters)
    while True:
        gone = {name for name, p in out.items() if any(dep in unset and None not in allowed
                                                       for dep, allowed in p.when.items())}
        if not gone:
            break
        unset |= gone
        for name in gone:
            out.pop(name)
    return {name: replace(p, when={dep: allowed for dep, allowed in p.when.items() if dep not in unset})
            if any(dep in unset for dep in p.when) else p for name, p in out.items()}
