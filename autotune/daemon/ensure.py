"""``autotune ensure``: the tuned configuration of this model in this environment, tuning only
when there is none yet.

The question "was this tuned before?" is keyed like the result cache (:func:`autotune.cache.result_key`):
the script's hash and arguments (``model_of``) and the versions, device, instance type and CPU count
(``environment_of``), plus what shapes the answer: target, search space, ``--set`` restrictions,
platform, processes and devices of each trial, metric and direction, and the measurement protocol. The key names the study
(``<script>-<target>-<key>``), so the lookup is one study load, locally or in the daemon's storage,
and tuning again tops the same study up. A stored study answers when it holds the wanted number of
measured trials and has a best one.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel

from autotune.daemon.messages import RunOptions
from autotune.errors import AutotuneError
from autotune.atomic_file import write_atomic
from autotune.results.outputs import BestConfig
from autotune.storage.database import sqlite_path
from autotune.storage.optuna_storage import open_storage, stored_study


class EnsureResult(BaseModel):
    """What ``autotune ensure --json`` prints."""

    source: Literal["stored", "tuned"]
    study: str
    ran: int = 0
    job: str | None = None
    env_file: str
    json_file: str
    best: BestConfig
    seconds: float = 0.0


class EnsureFailed(AutotuneError):
    """Tuning ran, and left no configuration to hand on."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def space_identity(name: str | None, text: str | None = None) -> str:
    """A search space as the key sees it: a file by its text, a built-in by its name."""
    if text is not None:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return name or "default"


def ensure_key(script: Path, args: list[str], target: Any, run: RunOptions, space: str) -> str:
    """The key of "this model tuned this way in this environment" (see the module docstring);
    ``space`` is the :func:`space_identity` of the search space."""
    from autotune.cache import environment_of, model_of
    from autotune.provenance import caller_env, provenance
    from autotune.records import PROTOCOL_VERSION

    prov = provenance(target, script, args, instance_type=run.instance_type,
                      env=caller_env(target, run.trial_env()))
    doc = {"model": model_of(prov), "environment": environment_of(prov), "target": target.name,
           "space": space, "platform": run.platform, "sets": dict(sorted(run.sets.items())),
           "nproc_per_node": run.nproc_per_node, "cores_per_trial": run.cores_per_trial,
           "metric": run.metric, "direction": run.direction, "protocol": PROTOCOL_VERSION,
           "numerics": run.loss_tolerance if run.numerics_guard else None}
    # Only where given, so that the keys of the studies tuned for one metric stay as they were.
    doc.update({name: getattr(run, name) for name in ("objective", "constraint", "prefer", "arg")
                if getattr(run, name)})
    if run.gpus_per_trial is not None:  # trials of 2 GPUs measure what trials of 1 do not
        doc["gpus_per_trial"] = run.gpus_per_trial
    if run.nnodes > 1:
        doc["nnodes"] = run.nnodes
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def ensure_study_name(script: Path, target_name: str, key: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", script.stem)[:60] or "script"
    return f"{stem}-{target_name}-{key[:12]}"


def stored_best(storage: Any, study_name: str, trials: int) -> BestConfig | None:
    """The best configuration of ``study_name`` if it holds ``trials`` measured trials, else None.

    ``storage`` is an Optuna storage (or URL); a study that does not exist is simply not stored.
    """
    from autotune.results.best import best_config
    from autotune.results.standings import trial_counts

    try:
        study = stored_study(storage, study_name)
    except KeyError:
        return None
    if trial_counts(study, exclude=set())[0] < trials:
        return None
    return best_config(study, study_name)


def write_best(best: BestConfig, out: Path) -> tuple[Path, Path]:
    """``best.env`` and ``best.json``: ``out`` names the env file (its JSON twin sits beside it),
    or an existing directory that receives both."""
    if out.is_dir():
        env_file, json_file = out / "best.env", out / "best.json"
    else:
        env_file = out
        json_file = out.with_suffix(".json") if out.suffix != ".json" else out.with_name(out.stem + ".best.json")
    try:
        env_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(json_file, best.model_dump_json(indent=2) + "\n")
        write_atomic(env_file, best.env_file())
    except OSError as exc:
        raise AutotuneError(f"cannot write {env_file}: {exc.strerror}; choose another --out") from None
    return env_file, json_file


def ensure_local(script: Path, args: list[str], run: RunOptions, *, out: Path, storage: str | None,
                 space_file: Path | None = None, ray_address: str | None = None, cache: Path | None = None,
                 on_update: Callable[[Any], None] | None = None) -> tuple[EnsureResult, int]:
    """Answer from the local storage, or tune here; returns the result and the exit code.

    ``space_file`` is the search-space file whose text is ``run.space_yaml``, if any."""
    from autotune.study.study import tune
    from autotune.storage.database import default_storage
    from autotune.targets import resolve_target
    from autotune.trial import check_script

    started = time.monotonic()
    script = check_script(script)
    target = resolve_target(run.target, script, run.gpus_per_trial)
    space = str(space_file) if space_file is not None else run.space
    key = ensure_key(script, args, target, run, space_identity(run.space, run.space_yaml))
    name = ensure_study_name(script, target.name, key)
    url = storage or default_storage()
    best = None
    path = sqlite_path(url)
    if path is None or path.exists():
        best = stored_best(_read_storage(url), name, run.trials)
    if best is not None:
        env_file, json_file = write_best(best, out)
        return EnsureResult(source="stored", study=name, env_file=str(env_file), json_file=str(json_file),
                            best=best, seconds=time.monotonic() - started), 0
    # ensure answers for the study its key names: it never starts that study anew.
    options = {**dict(run.job_config()), "target": target.name, "space": space, "study": name, "fresh": False}
    result = tune(script, *args, **options, ray_address=ray_address, storage=url, cache=cache, on_update=on_update)
    if result.best is None:
        raise EnsureFailed(f"every trial of study {name} failed: nothing to write to {out}; "
                           f"see autotune show {name}", result.exit_code)
    env_file, json_file = write_best(result.best, out)
    return EnsureResult(source="tuned", study=name, ran=result.ran, env_file=str(env_file),
                        json_file=str(json_file), best=result.best,
                        seconds=time.monotonic() - started), result.exit_code


def _read_storage(url: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_storage(url)
