"""One trial from the driver's side: check the script and the configuration, plan, run.

Everything that can be rejected is rejected here, before a process starts.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, InvalidConfigError, ScriptError
from autotune.records import (INTERCEPTIONS, PROCESSES_PARAM, KnobRoute, MeasurementProtocol, ScriptFlag, TrialPlan,
                              TrialResult)
from autotune.space import SearchSpace, builtin_space, load_space
from autotune.space.processes import most_processes, with_processes
from autotune.targets import Target, resolve_target
from autotune.workers.launcher import TrialLimits, run_trial


def check_script(path: str | Path) -> Path:
    """The script as a resolved path, or a :class:`ScriptError` saying what is wrong with it."""
    p = Path(path)
    if not p.exists():
        raise ScriptError(f"script not found: {path}")
    if not p.is_file():
        raise ScriptError(f"not a file: {path}; pass the training script itself")
    data = p.read_bytes()
    if b"\0" in data[:8192]:
        raise ScriptError(f"{path} is not a Python script (it looks binary)")
    try:
        compile(data, str(p), "exec")
    except SyntaxError as exc:
        raise ScriptError(f"{path}: line {exc.lineno}: {exc.msg}; the script must be valid Python") from None
    except ValueError as exc:
        raise ScriptError(f"{path} is not a Python script ({exc})") from None
    return p.resolve()


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """``["batch_size=32", "precision=bf16"]`` as a dict; a malformed item is an error."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigError(f"--set {item!r}: expected KEY=VALUE, for example --set batch_size=32")
        out[key.strip()] = value.strip()
    return out


def load_trial_space(target: Target, space: str | None, platform: str | None = None) -> SearchSpace:
    """The search space for ``target``: a file path, a built-in name, or the target's default."""
    if space is None:
        s = target.default_space(platform)
    elif Path(space).suffix in (".yaml", ".yml") or Path(space).exists():
        s = load_space(space)
    else:
        s = builtin_space(space)
    if s.target != target.name:
        raise AutotuneError(f"search space {s.source} is for target {s.target!r}, not {target.name!r}")
    return target.fit_space(s)


def validate_for(target: Target, space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``space.validate`` that, for a parameter of another platform's space, names that platform."""
    try:
        return space.validate(params)
    except InvalidConfigError as exc:
        unknown = [k for k in params if k not in space.parameters]
        if unknown:
            # The target may know the parameter and why it cannot apply here (-lnc on trn1).
            typed = {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in params.items()}
            target.check({**space.fixed, **typed})
        for name in unknown:
            for other in target.spaces:
                try:
                    if name in builtin_space(other).parameters:
                        raise InvalidConfigError(
                            f"{exc}. {name!r} belongs to the {other} space: choose that platform "
                            f"(--platform {other.split('-', 1)[-1]} or --space {other})") from None
                except AutotuneError as inner:
                    if isinstance(inner, InvalidConfigError):
                        raise
        raise


def plan_for(target: Target, space: SearchSpace, params: dict[str, Any], *, cache_root: str | None = None,
             base_env: dict[str, str] | None = None) -> TrialPlan:
    """``params`` (canonical) as a trial applies them: the target's plan, in which the parameters
    that the space gives the script as flags of its own (``arg``) take no part unless they are
    intercepted too, those flags, and how each parameter reaches the script.

    Its parameters are all of ``params`` whichever way each is applied, so that a configuration
    keeps its keys (:func:`autotune.space.config_key`), its results and its compiled graphs."""
    flags = {n: p.arg for n in params if (p := space.parameters.get(n)) is not None and p.arg is not None}
    by_target = {n: v for n, v in params.items() if n not in flags or space.parameters[n].intercept}
    plan = target.plan(by_target, base_env) if cache_root is None else \
        target.cached_plan(by_target, cache_root, base_env)
    plan.params = dict(params)
    plan.script_flags = [ScriptFlag.of(n, flag, params[n]) for n, flag in flags.items()]
    plan.routes = {n: [] for n in params}
    plan.routes.update(_routes(target, by_target, base_env))
    for flag in plan.script_flags:
        plan.routes[flag.param].append(KnobRoute(kind="script argument", detail=flag.describe()))
    return plan


def _routes(target: Target, params: dict[str, Any], base_env: dict[str, str] | None) -> dict[str, list[KnobRoute]]:
    """How the target applies each parameter: what its plan has that the plan without the
    parameter (the script's own value) has not."""
    full = target.plan(params, base_env)
    routes: dict[str, list[KnobRoute]] = {}
    for name in params:
        try:
            without = target.plan({k: v for k, v in params.items() if k != name}, base_env)
        except AutotuneError:
            routes[name] = [KnobRoute(kind="target", detail=f"applied by the {target.name} target")]
            continue
        routes[name] = _difference(full, without)
    return routes


def _difference(full: TrialPlan, without: TrialPlan) -> list[KnobRoute]:
    routes: list[KnobRoute] = []
    for key in sorted(set(full.env) | set(without.env)):
        if full.env.get(key) == without.env.get(key):
            continue
        if key in (full.flags_env, without.flags_env):
            routes.append(KnobRoute(kind="compiler flag", detail=key))
        else:
            routes.append(KnobRoute(kind="env var", detail=f"{key}={full.env[key]}" if key in full.env
                                    else f"{key} unset"))
    mine, theirs = full.knobs.model_dump(), without.knobs.model_dump()
    by_label: dict[str, list[str]] = {}
    for knob in mine:
        if mine[knob] != theirs[knob]:
            by_label.setdefault(INTERCEPTIONS.get(knob, (knob, None))[0], []).append(knob)
    routes += [KnobRoute(kind="interception", detail=label, knobs=knobs) for label, knobs in by_label.items()]
    if full.nproc_per_node != without.nproc_per_node:
        routes.append(KnobRoute(kind="launch", detail=full.launch or "one process"))
    return routes


@dataclass
class PreparedTrial:
    target: Target
    space: SearchSpace
    params: dict[str, Any]
    plan: TrialPlan
    script: Path


def prepare_trial(script: str | Path, *, target: str = "auto", sets: dict[str, Any] | None = None,
                  space: str | None = None, platform: str | None = None,
                  base_env: dict[str, str] | None = None, cache_root: str | None = None,
                  nproc_per_node: int = 1, flags: dict[str, str] | None = None) -> PreparedTrial:
    """Check everything and build the plan; raises :class:`AutotuneError` on bad input.

    With ``cache_root`` the target's compiler cache under it is wired into the plan's env; with
    ``nproc_per_node`` above 1 the trial runs on that many processes; ``flags`` gives parameters to
    the script as flags of its own (``--arg``)."""
    path = check_script(script)
    tgt = resolve_target(target, path)
    sp, given = with_processes(load_trial_space(tgt, space, platform).with_flags(dict(flags or {})),
                               dict(sets or {}), nproc_per_node)
    # A trial is one configuration: a parameter given several values (--set batch_size=16,32) runs at
    # the first, as a study's baseline does.
    listed = {n: sp.parameters[n].default for n in dict(sets or {})
              if n not in given and n in sp.parameters and n != PROCESSES_PARAM}
    params = validate_for(tgt, sp, {**listed, **given})
    tgt.check(params)
    tgt.check_processes(most_processes(sp), 1)
    env = dict(os.environ) if base_env is None else base_env  # the user's PJRT_DEVICE, XLA_FLAGS, ...
    plan = plan_for(tgt, sp, params, cache_root=cache_root, base_env=env)
    return PreparedTrial(tgt, sp, params, plan, path)


def default_trial_dir(root: str | Path = ".autotune") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / "trials" / stamp
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{stamp}-{n}")
    return path


def run_prepared(prepared: PreparedTrial, args: list[str] | None = None, *, trial_dir: str | Path,
                 limits: TrialLimits, protocol: MeasurementProtocol | None = None,
                 seed: int = 0) -> TrialResult:
    return run_trial(prepared.plan, prepared.script, args, trial_dir=trial_dir, limits=limits,
                     protocol=protocol, seed=seed)
