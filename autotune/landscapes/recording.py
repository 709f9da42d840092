"""Recording a landscape: every configuration of a small space (or a seeded sample of a large one)
run once, one after the other, each appended to the file (:mod:`autotune.landscapes.landscape`) as
it ends.

A space too large to enumerate (the built-in ones) is recorded as a seeded sample of it
(``RecordOptions.sample``, :func:`autotune.search.configurations.sample_space`): the baseline and
the known-good configurations first, then a space-filling sequence.

Recording is resumable: configurations already in the file are skipped, so a killed recording
continues where it stopped (and a sample recorded again with the same seed and a larger ``n``
continues with the configurations that follow).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError
from autotune.landscapes.landscape import (
    FORMAT_VERSION,
    ConfigRecord,
    Landscape,
    runs_by_configuration,
    by_configuration,
    canonical,
    load_landscape,
)
from autotune.landscapes.surrogate import SurrogateLandscape
from autotune.records import MeasurementProtocol
from autotune.search.configurations import enumerate_space, grid_size, sample_space
from autotune.space import SearchSpace, config_key, load_space

#: Thread settings decide figures on a shared machine; each target adds the variables it reads.
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class RecordOptions:
    script: str | Path
    target: str
    space: str | Path
    out: str | Path
    args: list[str] = field(default_factory=list)
    trial_timeout: float = 300.0
    protocol: MeasurementProtocol = field(default_factory=lambda: MeasurementProtocol(
        max_measure_seconds=5.0, min_windows=4))
    #: Cache root of the recording's compiled artifacts and trial logs (default:
    #: ``.autotune/landscapes/<name>/``, kept out of the repository).
    cache: str | Path | None = None
    trials_dir: str | Path | None = None
    limit: int | None = None  # record at most this many new configurations (a smoke test)
    #: Record this many configurations of a seeded sample of the space instead of every one.
    sample: int | None = None
    seed: int = 0
    #: After the sample, record this many more: each the configuration not recorded yet that a
    #: surrogate fitted on everything recorded so far predicts best (:func:`_refinement`).
    refine: int | None = None
    #: Then measure again until this many configurations with the highest mean figure have
    #: each been measured at least twice (:func:`_repeat`).
    repeat: int | None = None

    def check(self) -> None:
        if self.refine is not None and (self.sample is None or self.refine < 0):
            raise AutotuneError("--refine continues a sample (--sample N): give both, --refine at least 0")
        if self.repeat is not None and self.repeat < 1:
            raise AutotuneError("--repeat must be at least 1")


#: A space with more configurations than this is recorded as a sample (``--sample``), not a grid.
MAX_GRID = 5000


def recorded_configurations(space: SearchSpace, o: RecordOptions) -> list[dict[str, Any]]:
    """What a recording runs, in order: every configuration of the space, or its sample."""
    if o.sample is not None:
        if o.sample < 1:
            raise AutotuneError("--sample must be at least 1")
        return sample_space(space, o.sample, o.seed)
    if grid_size(space) > MAX_GRID:
        raise AutotuneError(f"{o.space} has up to {grid_size(space):,} configurations, too many to record "
                            "every one; record a sample of it with --sample 150")
    return enumerate_space(space)


def record(o: RecordOptions, on_config: Callable[[ConfigRecord, int], None] | None = None) -> Landscape:
    """Run every configuration of ``o.space`` (or of its sample, ``o.sample``) not yet in ``o.out``,
    one after the other, in order."""
    from autotune.provenance import provenance
    from autotune.targets import resolve_target
    from autotune.trial import check_script, plan_for
    from autotune.workers.launcher import TrialLimits, run_trial

    script = check_script(o.script)
    space = load_space(o.space)
    target = resolve_target(o.target, script)
    if space.target != target.name:
        raise AutotuneError(f"search space {o.space} is for target {space.target!r}, not {target.name!r}")
    o.check()
    configs = recorded_configurations(space, o)
    out = Path(o.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cache_root = Path(o.cache) if o.cache else Path(".autotune") / "landscapes" / out.stem
    trials_dir = Path(o.trials_dir) if o.trials_dir else cache_root / "trials"
    earlier: list[ConfigRecord] = []
    if out.exists() and out.stat().st_size:
        existing = load_landscape(out)
        _check_same_recording(existing.header, o, target.name)
        earlier = existing.records
        _drop_torn_line(out)
        header = dict(existing.header)
        if o.sample is not None and (existing.header.get("configurations") != len(configs)
                                     or (o.refine or 0) > existing.header.get("refine", 0)):  # extended
            header.update({"configurations": len(configs), "sample": {"n": o.sample, "seed": o.seed},
                           **({"refine": o.refine} if o.refine else {})})
        if (o.repeat or 0) > existing.header.get("repeat", 0):
            header["repeat"] = o.repeat
        if header != existing.header:
            _rewrite_header(out, header)
    else:
        header = {
            "kind": "header", "format": FORMAT_VERSION, "target": target.name,
            "script": os.path.relpath(script, Path.cwd()) if script.is_relative_to(Path.cwd()) else str(script),
            "args": list(o.args), "space_source": str(o.space), "space_yaml": Path(o.space).read_text(),
            "protocol": o.protocol.model_dump(mode="json"), "trial_timeout_s": o.trial_timeout,
            "compile_cache_persists": target.compile_cache_persists(),
            # What of the recording's environment decides its figures (threads on a shared machine).
            "env": {k: os.environ[k] for k in _recorded_env() if k in os.environ},
            "configurations": len(configs), "started_at": time.time(),
            **({"sample": {"n": o.sample, "seed": o.seed}} if o.sample is not None else {}),
            **({"refine": o.refine} if o.refine else {}),
            **({"repeat": o.repeat} if o.repeat else {}),
            "provenance": provenance(target, script, o.args),
        }
        with open(out, "w") as fh:
            fh.write(json.dumps(header, sort_keys=True) + "\n")
    recorded = 0
    space = space.same_as_script(dict(header.get("script_loader") or {}))
    # What the space calls the same run now (``unset_is``) was recorded once already.
    done = {config_key(canonical(space, r.params)) for r in earlier}
    baseline = config_key(space.defaults())

    def run(index: int, params: dict[str, Any], run_name: str | None = None) -> None:
        nonlocal recorded, space
        plan = plan_for(target, space, params, cache_root=str(cache_root.resolve()))
        result = run_trial(plan, script, o.args, trial_dir=trials_dir / (run_name or f"{index:04d}"),
                           limits=TrialLimits(timeout_s=o.trial_timeout), protocol=o.protocol)
        if result.ok and config_key(params) == baseline and "script_loader" not in header:
            # What the script gives its DataLoaders itself: the same run as leaving them unset.
            learned = space.same_as_script(result.script_loader_values)
            if learned is not space:
                header["script_loader"] = result.script_loader_values
                _rewrite_header(out, header)
                space = learned
        done.add(config_key(canonical(space, params)))
        rec = ConfigRecord.from_result(index, params, result)
        with open(out, "a") as fh:  # one line per configuration, written whole: a kill loses one trial
            fh.write(json.dumps(rec.to_json(), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        recorded += 1
        if on_config:
            on_config(rec, len(configs) + (o.refine or 0))

    for index, params in enumerate(configs):
        if config_key(canonical(space, params)) in done:
            continue
        if o.limit is not None and recorded >= o.limit:
            return load_landscape(out)
        run(index, params)
    while o.refine and (o.limit is None or recorded < o.limit):
        landscape = load_landscape(out)
        refined = len({r.key for r in landscape.records if r.index >= len(configs)})  # a repeat is no new one
        if refined >= o.refine:
            break
        params = _refinement(landscape)
        if params is None:
            break
        run(len(configs) + refined, params)
    while o.repeat and (o.limit is None or recorded < o.limit):
        landscape = load_landscape(out)
        again = _repeat(landscape, o.repeat)
        if again is None:
            break
        run(again.index, canonical(space, again.params), run_name=f"{again.index:04d}-2")  # its second run
    return load_landscape(out)


def _repeat(landscape: Landscape, top: int) -> ConfigRecord | None:
    """The configuration to measure again: of the ``top`` configurations with the highest mean
    figure, the first measured only once; None when each of them has two measurements or more.

    One measurement of a short run does not bound the next: the best of a recording is the
    configuration whose single draw came out highest as much as the fastest one. Measuring again
    what ranks first, until the first ``top`` by their means have each been measured twice, lets a
    lucky draw fall back and the next come up, and shows the noise between runs beside the
    interval within each (:mod:`autotune.landscapes.surrogate` fits both). A continued recording
    picks up where it stopped; a failure of a configuration that ran before counts as a
    measurement, never as its figure."""
    runs = runs_by_configuration(landscape)
    for mean, _ in by_configuration(landscape)[:top]:
        rs = runs[config_key(canonical(landscape.space, mean.params))]
        if len(rs) < 2:
            return rs[0]
    return None


def _refinement(landscape: Landscape) -> dict[str, Any] | None:
    """The configuration not recorded yet that a surrogate of ``landscape`` predicts best, or None
    when it predicts nothing new to run.

    A sample of a large space holds few configurations near its best, where a surrogate fitted on
    it is least sure and a search spends its last trials: boosting adds up the small effects of
    many knobs into an optimum that nothing measured supports. Recording what the surrogate
    believes best, refitting and going on, is how its optimum comes to rest on measurements."""
    space = landscape.space
    done = {config_key(canonical(space, r.params)) for r in landscape.records}
    for rec in SurrogateLandscape(landscape).ranked():
        params = canonical(space, rec.params)
        if config_key(params) not in done:
            return params
    return None


def _recorded_env() -> list[str]:
    from autotune.targets import all_targets

    return [*_THREAD_ENV, *(var for target in all_targets() for var in target.environment)]


def _check_same_recording(header: dict[str, Any], o: RecordOptions, target: str) -> None:
    import yaml

    same_space = yaml.safe_load(header.get("space_yaml") or "") == yaml.safe_load(Path(o.space).read_text())
    if header.get("target") != target or header.get("args") != list(o.args) or not same_space:
        raise AutotuneError(f"{o.out} holds a recording of another target, space or script arguments; "
                            "choose another --out to record this one")
    sample = header.get("sample")
    if (sample is None) != (o.sample is None) or (sample is not None and sample.get("seed") != o.seed):
        was = f"a sample of seed {sample.get('seed')} (--sample N --seed {sample.get('seed')})" if sample \
            else "every configuration (no --sample)"
        raise AutotuneError(f"{o.out} holds {was}; continue it as it was begun, or choose another --out")


def _rewrite_header(path: Path, header: dict[str, Any]) -> None:
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() and json.loads(line).get("kind") == "header":
            lines[i] = json.dumps(header, sort_keys=True) + "\n"
            break
    write_atomic(path, "".join(lines))


def _drop_torn_line(path: Path) -> None:
    """Cut a last line that a killed recording left half-written."""
    text = path.read_text()
    if text and not text.endswith("\n"):
        path.write_text(text[: text.rfind("\n") + 1])
