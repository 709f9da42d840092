"""What a worker gets for one configuration of a study: its plan in the caller's environment, the
script and its arguments, where its files go, and the protocol it measures by."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.records import CompileRequest, MeasurementProtocol, TrialPlan, TrialRequest, TrialResult
from autotune.space import SearchSpace, compile_key, config_key
from autotune.execution.compile_stage import compile_job
from autotune.study.options import StudyOptions
from autotune.targets import Target
from autotune.trial import plan_for

if TYPE_CHECKING:
    import optuna


class TrialRequests:
    """Requests for the trials of one study. ``space`` is the study's space as it stands: a knob
    that never reached the script is held from then on."""

    def __init__(self, target: Target, space: SearchSpace, script: Path, options: StudyOptions, *,
                 environ: dict[str, str], caller_env: dict[str, str], cache_root: Path | None,
                 memory_limit: int | None, provenance: dict[str, Any]) -> None:
        from autotune.cache import environment_of, model_of

        self.target = target
        self.space = space
        self.script = script
        self.options = options
        #: The environment a trial would inherit from the caller, and what of it travels with each trial.
        self.environ = environ
        self.caller_env = caller_env
        #: Where compiled graphs and results are kept (``None``: a study kept in memory keeps none).
        self.cache_root = cache_root
        self.memory_limit = memory_limit
        #: Where it measures, as each submitted trial keeps it; the parts of it that key remembered
        #: results and compiled graphs.
        self.provenance = provenance
        self.model_key: dict[str, Any] = model_of(provenance)
        self.env_key: dict[str, Any] = environment_of(provenance)

    def hold_idle_knobs(self, number: int, result: TrialResult, baseline: dict[str, Any],
                        sampler: optuna.samplers.BaseSampler) -> list[str]:
        """Hold each parameter that trial ``number`` shows never reached the script (a batch size
        with no DataLoader to set it on) at the ``baseline``'s value for the rest of the study, in
        the space and in ``sampler``: its other values would measure the same run under other
        names, and a best among them is noise. Returns what the study's notes should say."""
        idle = {k.param: k.detail for k in result.idle_knobs
                if k.param in self.space.parameters and k.param not in self.space.fixed}
        if not idle:
            return []
        held = {name: baseline.get(name) for name in idle}
        self.space = self.space.restrict(held)
        pin = getattr(sampler, "pin", None)  # autotune's sampler; Optuna's propose from the space alone
        if pin is not None:
            pin(held)
        return [f"{name} never reached the script (trial {number}: {detail}); the rest of the study keeps "
                + ("the script's own value" if held[name] is None else f"{name}={held[name]}")
                for name, detail in idle.items()]

    def same_as_script(self, number: int, result: TrialResult, baseline: dict[str, Any],
                       sampler: optuna.samplers.BaseSampler) -> list[str]:
        """Learn from trial ``number``, where it ran the ``baseline``, what the script gives its
        DataLoaders itself, where it gave every one of them the same: setting a knob to that value
        is the same run as leaving it unset, in the space and in ``sampler``, so the study measures
        it once (the two measured apart would read as two configurations, and the better of them
        as noise). Returns what the study's notes should say, once."""
        if not result.ok or config_key(result.plan.params) != config_key(baseline):
            return []
        space = self.space.same_as_script(result.script_loader_values)
        if space is self.space:
            return []
        learned = {name: p.unset_is for name, p in space.parameters.items()
                   if p.unset_is is not None and self.space.parameters[name].unset_is is None}
        self.space = space
        same = getattr(sampler, "same_as_unset", None)  # autotune's sampler; Optuna's are told duplicates
        if same is not None:
            same(learned)
        shown = " and ".join(f"{name} {value}" for name, value in learned.items())
        return [f"trial {number} shows the script's own DataLoader {shown}: a configuration that sets "
                f"{'it' if len(learned) == 1 else 'them'} so is the same run as one that leaves "
                f"{'it' if len(learned) == 1 else 'them'} unset, and is measured once"]

    def plan(self, params: dict[str, Any]) -> TrialPlan:
        """``params`` as a trial applies them in the caller's environment: the target adds its flags
        to the caller's (theirs kept, its own winning on the same flag) and keeps a device the caller
        chose; the caller's variables travel in the plan, to whichever worker runs it."""
        plan = plan_for(self.target, self.space, params, base_env=self.environ,
                        cache_root=str(self.cache_root) if self.cache_root is not None else None)
        for name, value in self.caller_env.items():
            plan.env.setdefault(name, value)
        return plan

    def request(self, params: dict[str, Any], trial_dir: Path, protocol: MeasurementProtocol,
                plan: TrialPlan | None = None) -> TrialRequest:
        """What a worker needs to run one trial of ``params``."""
        return TrialRequest(
            plan=plan or self.plan(params),
            script=str(self.script),
            args=list(self.options.args), cwd=os.getcwd(), trial_dir=str(trial_dir.resolve()),
            timeout_s=self.options.trial_timeout, memory_bytes=self.memory_limit, protocol=protocol,
            seed=self.options.seed or 0)

    def result_key(self, params: dict[str, Any], devices_per_trial: int | None) -> str:
        from autotune.cache import result_key

        return result_key(model=self.model_key, environment=self.env_key, target=self.target.name,
                          params=params, protocol_version=self.options.protocol.version,
                          devices_per_trial=devices_per_trial)

    def compile_split(self, request: TrialRequest) -> tuple[CompileRequest, TrialRequest] | None:
        """``request`` as a compile job and the measure job that follows it (:func:`compile_job`)."""
        from autotune.cache import artifact_key

        return compile_job(self.target, request, platform=self.options.platform, cache_root=str(self.cache_root),
                           key_of=lambda env: artifact_key(
                               model=self.model_key, environment=self.env_key, target=self.target.name,
                               graphs=compile_key(request.plan.params), env=env))
