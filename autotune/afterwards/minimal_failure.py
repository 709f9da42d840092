"""``autotune minimize``: the smallest set of moved knobs that still fails, and its bug report.

A failing configuration (given with ``--set``, or a failed trial of a stored study) moves some
knobs away from the baseline. :func:`autotune.search.minimize.minimize` reduces them; here each
set it asks about becomes the baseline with those knobs moved, run as a trial or answered by a
result the cache root remembers under the key a study would have given it (so a configuration
measured before, by a study or an earlier reduction, runs no trial). A set fails the same way when
its trial fails with the same category and the same first line of the reason. The folder written
at the end holds what a compiler bug report needs.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError
from autotune.records import NEUTRAL_KNOB_VALUES, Failure, TrialResult
from autotune.search.minimize import Reduction, Verdict, minimize


def first_line(reason: str) -> str:
    return next((line.strip() for line in reason.splitlines() if line.strip()), "")


def same_failure(reference: Failure, result: TrialResult) -> bool:
    """Whether ``result`` failed as ``reference`` did: the same category, the same first line."""
    return result.failure is not None and result.failure.category == reference.category \
        and first_line(result.failure.reason) == first_line(reference.reason)


def moved_knobs(baseline: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The knobs of ``config`` away from ``baseline``, each with its value in ``config`` (``None``:
    ``config`` leaves it at the script's own value)."""
    return {k: config.get(k) for k in sorted(set(baseline) | set(config)) if baseline.get(k) != config.get(k)}


def with_moved(baseline: dict[str, Any], moved: dict[str, Any], subset: frozenset[str]) -> dict[str, Any]:
    """The baseline with the knobs of ``subset`` moved as ``moved`` moves them."""
    config = dict(baseline)
    for name in subset:
        if moved[name] is None:
            config.pop(name, None)
        else:
            config[name] = moved[name]
    return config


@dataclass
class Outcome:
    """A reduction and what backs it."""

    reference: Failure
    baseline: dict[str, Any]
    moved: dict[str, Any]
    reduction: Reduction
    #: The failing result of the smallest set (the configuration's own where nothing was removed).
    result: TrialResult
    #: The trial results of every set tested, by the knobs moved (sorted, joined by ``+``).
    results: dict[str, TrialResult] = field(default_factory=dict)
    #: A trial ran for the configuration itself, before the reduction (not for a failed trial of a study).
    reference_ran: bool = False

    @property
    def trials(self) -> int:
        """The trials that ran, the configuration's own included."""
        return self.reduction.ran + self.reference_ran

    @property
    def tested(self) -> int:
        """The configurations whose result was needed, the failing one included."""
        return self.reduction.tested + 1

    @property
    def knobs(self) -> dict[str, Any]:
        return {k: self.moved[k] for k in self.reduction.knobs}

    def summary(self) -> dict[str, Any]:
        """What ``--json`` prints and ``minimal.json`` holds."""
        r = self.reduction
        return {"knobs": self.knobs, "minimal": r.minimal, "needed": r.needed, "unproven": r.unproven,
                "moved": self.moved, "baseline": self.baseline, "trials": self.trials, "tested": self.tested,
                "from_cache": self.tested - self.trials, "category": self.reference.category.value,
                "reason": self.reference.reason, "config": self.result.plan.params}

    def proof(self) -> str:
        """What the reduction showed, in a sentence."""
        r = self.reduction
        shown = (f"{_names(self.knobs)} fails ({self.reference.category.value}: {first_line(self.reference.reason)})"
                 if r.knobs else f"the baseline itself fails ({self.reference.category.value}: "
                                 f"{first_line(self.reference.reason)})")
        if r.minimal:
            why = "; removing any one of them does not fail that way" if len(r.knobs) > 1 else \
                "; without it the configuration does not fail that way" if r.knobs else ""
            return f"{shown}{why}"
        unproven = _names({k: None for k in r.unproven}, values=False)
        return f"{shown}; the budget ran out before removing each of {unproven} was tried: the set may shrink further"


def _names(knobs: dict[str, Any], values: bool = True) -> str:
    return ", ".join(f"{k}={v}" if values else k for k, v in knobs.items())


def reduce_failure(reference: Failure, baseline: dict[str, Any], config: dict[str, Any],
                   run: Callable[[dict[str, Any], str], tuple[TrialResult, bool]], *,
                   reference_result: TrialResult, reference_ran: bool = False, budget: int | None = None) -> Outcome:
    """Reduce ``config`` (which failed as ``reference``, in ``reference_result``) towards
    ``baseline``; ``run(config, name)`` gives a configuration's result and whether a trial ran."""
    moved = moved_knobs(baseline, config)
    if not moved:
        raise AutotuneError("the failing configuration is the baseline: there is no moved knob to remove")
    results: dict[str, TrialResult] = {}

    def test(subset: frozenset[str]) -> Verdict:
        name = "+".join(sorted(subset)) or "baseline"
        result, ran = run(with_moved(baseline, moved, subset), name)
        results[name] = result
        return Verdict(same_failure=same_failure(reference, result), ran=ran)

    reduction = minimize(moved, test, budget=budget)
    smallest = "+".join(reduction.knobs) or "baseline"
    return Outcome(reference=reference, baseline=baseline, moved=moved, reduction=reduction,
                   result=results.get(smallest, reference_result), results=results, reference_ran=reference_ran)


def write_bug_report(folder: Path, outcome: Outcome, *, script: Path, args: list[str], target: str,
                     space: str | None, provenance: dict[str, Any]) -> Path:
    """The folder a compiler bug report is written from: ``README.md`` (the knobs, the env vars and
    compiler flags, the versions, the log's tail), ``minimal.json``, ``provenance.json``,
    ``log_tail.txt`` and ``reproduce.sh`` (the trial again with autotune, and the plain command
    where every knob is an env var or a flag)."""
    folder.mkdir(parents=True, exist_ok=True)
    result, plan = outcome.result, outcome.result.plan
    sets = " ".join(f"--set {shlex.quote(f'{k}={v}')}" for k, v in sorted(plan.params.items()))
    args_text = " ".join(shlex.quote(a) for a in args)
    autotune_cmd = (f"autotune trial {shlex.quote(str(script))} --target {target}"
                    + (f" --space {shlex.quote(space)}" if space else "") + (f" {sets}" if sets else "")
                    + (f" -- {args_text}" if args else ""))
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items()))
    launch = plan.launch or "python"
    script_args = " ".join(shlex.quote(a) for a in plan.script_args(list(args)))
    plain = f"env {env} {launch} {shlex.quote(str(script))} {script_args}".replace("  ", " ").strip()
    knobs = plan.knobs.model_dump()
    applied = sorted({k for route in plan.routes.values() for r in route if r.kind == "interception"
                      for k in r.knobs if knobs.get(k) not in (None, False, NEUTRAL_KNOB_VALUES.get(k))})
    write_atomic(folder / "reproduce.sh", "#!/bin/sh\n# The smallest failing configuration, with autotune:\n"
                 f"{autotune_cmd}\n# Without autotune"
                 + (f" (the harness also applies {', '.join(applied)}, which this line does not)" if applied else "")
                 + f":\n# {plain}\n")
    (folder / "reproduce.sh").chmod(0o755)
    write_atomic(folder / "minimal.json", json.dumps(outcome.summary(), indent=2, default=str) + "\n")
    write_atomic(folder / "provenance.json", json.dumps(provenance, indent=2, default=str) + "\n")
    write_atomic(folder / "log_tail.txt", result.log_tail)
    versions = {"autotune": provenance.get("autotune"), "python": provenance.get("python"),
                **(provenance.get("versions") or {})}
    lines = [
        f"# Smallest failing configuration of {script.name} ({target})", "",
        outcome.proof() + ".", "",
        (f"Moved from the baseline: {_names(outcome.moved)}; {outcome.trials} trials ran ({outcome.tested} "
         f"configurations tested, {outcome.tested - outcome.trials} answered by remembered results)."), "",
        "## Knobs", "", *([f"- {k} = {v}" for k, v in outcome.knobs.items()] or ["- none (the baseline)"]), "",
        "## Env vars and compiler flags", "",
        *[f"- {k}={v}" for k, v in sorted(plan.env.items())],
        *([f"- compiler flags ({plan.flags_env}): {plan.compiler_flags}"] if plan.compiler_flags else []), "",
        "## Versions", "", *[f"- {k}: {v}" for k, v in versions.items() if v],
        f"- device: {provenance.get('device')} on {provenance.get('host_device')}"
        + (f", {provenance['instance_type']}" if provenance.get("instance_type") else ""), "",
        "## Reproduce", "", "```sh", autotune_cmd, "```", "",
        "## The failure", "", f"{outcome.reference.category.value}: {outcome.reference.reason}", "",
        "```", result.log_tail.rstrip(), "```", "",
    ]
    write_atomic(folder / "README.md", "\n".join(lines))
    return folder
