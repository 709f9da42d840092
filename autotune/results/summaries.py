"""A summary of each trial of a stored study (``autotune show``, trials.csv, the report): what the
trial itself measured, with its configuration's figures (:mod:`.standings`) joined to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.machine.pricing import utilisation
from autotune.measurement.noise import RunNoise
from autotune.records import TrialResult
from autotune.results.best import study_cost
from autotune.results.outputs import TrialSummary
from autotune.results.standings import Headline, _folded, _headlines, _key, _single, _value, _violates_numerics, \
    noise_of, run_figure
from autotune.storage.attrs import StudyAttrs, TrialAttrs
from autotune.storage.folded import Context

if TYPE_CHECKING:
    import optuna


def study_summaries(study: optuna.Study) -> list[TrialSummary]:
    """A summary of each trial, in number order, each with its configuration's figures. What a
    finished trial itself says is made once and kept with the study's sums (:func:`_folded`); its
    configuration's figures are joined to it where they changed."""
    trials = study.get_trials(deepcopy=False)
    fold = _folded(study, trials)
    noise = noise_of(study)
    heads = _headlines(study)
    out = []
    with fold.lock:
        context = fold.context
        assert context is not None  # the fold sets it
        for t in trials:
            kept = fold.summaries.get(t.number)
            if kept is None:
                kept = _Summary(*_summary(t, context, fold.base_losses), key=_own_key(t, trials))
                if t.state.is_finished():
                    fold.summaries[t.number] = kept
            out.append(kept.shown_with(heads.get(kept.key) or kept.alone(t, context, noise), context.attrs))
    return out


def _own_key(t: optuna.trial.FrozenTrial, trials: list[optuna.trial.FrozenTrial]) -> str:
    """The key of the configuration ``t`` measured (a duplicate's: the trial it repeats)."""
    told = TrialAttrs.of(t)
    if told.config_key is None and told.duplicate_of is not None and told.duplicate_of < len(trials):
        return _key(trials[told.duplicate_of])
    return _key(t)


@dataclass
class _Summary:
    """What a trial's summary says of the trial itself; the key of its configuration; and the
    summary last shown, with the figures it was shown with."""

    bare: TrialSummary
    #: What the FLOP/s of its figures need beside the FLOPs per sample: the processes and where
    #: the model ran.
    processes: int
    model_device: str | None
    key: str
    head: Headline | None = None
    shown: TrialSummary | None = None
    #: The trial's own figures, where it is not one of the ranked configurations' runs.
    _alone: tuple[RunNoise, Headline | None] | None = None

    def alone(self, t: optuna.trial.FrozenTrial, context: Context, noise: RunNoise) -> Headline | None:
        if self._alone is None or self._alone[0] != noise:
            self._alone = noise, _single(t, context, noise)
        return self._alone[1]

    def shown_with(self, head: Headline | None, stored: StudyAttrs) -> TrialSummary:
        """The summary with its configuration's figures (``head``; ``None``: it has none)."""
        if self.shown is not None and self.head is head:
            return self.shown
        figures: dict[str, Any] = {"value": None, "values": {}, "runs": 0, "value_ci95_low": None,
                                   "value_ci95_high": None, "throughput": None, "ci95_low": None, "ci95_high": None,
                                   "usd_per_million_samples": None, "flops_per_second": None, "mfu": None}
        if head is not None and self.bare.state == "COMPLETE":
            thr = head.throughput
            use = utilisation(self.bare.flops_per_sample, thr.mean if thr else None, stored.provenance or {},
                              devices_per_trial=stored.devices_per_trial, processes=self.processes,
                              nodes=stored.nodes_per_trial or 1, model_device=self.model_device) \
                if self.bare.flops_per_sample else None
            figures.update(value=head.value.mean, values=head.values, runs=head.value.runs,
                           value_ci95_low=head.value.low, value_ci95_high=head.value.high,
                           throughput=thr.mean if thr else None, ci95_low=thr.low if thr else None,
                           ci95_high=thr.high if thr else None,
                           usd_per_million_samples=_usd_per_million(stored, thr.mean if thr else None),
                           flops_per_second=use.flops_per_second if use else None, mfu=use.mfu if use else None)
        self.head, self.shown = head, self.bare.model_copy(update=figures)
        return self.shown


def _summary(t: optuna.trial.FrozenTrial, context: Context,
             base: list[float]) -> tuple[TrialSummary, int, str | None]:
    """What a trial's summary says of the trial itself (all but its configuration's figures), and
    its processes and where its model ran."""
    stored, index = context.attrs, context.index
    attrs = TrialAttrs.of(t)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    m = result.measurement if result else None
    value = _value(t, index) if t.state.name == "COMPLETE" else None
    return TrialSummary(
        number=t.number, state=t.state.name,
        params=dict(result.plan.params) if result else {k: v for k, v in t.params.items() if v is not None},
        run=run_figure(t, result, context.objectives, value) if value is not None and attrs.duplicate_of is None
        else None,
        violated=attrs.violated or [], idle=attrs.idle or [],
        flops_per_sample=m.flops_per_sample if m else None,
        pruned=bool(m and m.pruned),
        category=attrs.category, reason=attrs.reason,
        log_tail=result.log_tail if result and not result.ok else None,
        wall_seconds=result.wall_seconds if result else None,
        compile_seconds=result.compile.compile_seconds if result else None,
        duplicate_of=attrs.duplicate_of, confirms=attrs.confirms, again=attrs.again, env=attrs.env or {}, cached=attrs.cached,
        cache_hits=result.compile.cache_hits if result else None,
        cache_misses=result.compile.cache_misses if result else None,
        compile_stage_seconds=result.compile_stage.seconds if result and result.compile_stage else None,
        compile_stage=result.compile_stage if result else None,
        measure_compile_seconds=(result.compile.compile_seconds or 0.0)
        if result and result.compile_stage and result.ok else None,
        placement=result.placement if result else {},
        started_at=result.started_at if result else None, ended_at=result.ended_at if result else None,
        numerics_violated=t.state.name == "COMPLETE" and _violates_numerics(attrs, base, stored, result),
        losses=result.losses[:5] if result else [],
    ), result.plan.nproc_per_node if result else 1, m.model_device if m else None


def _usd_per_million(stored: StudyAttrs, throughput: float | None) -> float | None:
    cost = study_cost(stored, throughput)
    return cost.usd_per_million_samples if cost else None
