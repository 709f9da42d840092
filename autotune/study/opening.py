"""Opening a study's Optuna study: created once, then continued only by runs of the same script,
arguments and environment, for the same target and objectives.

A run whose script, arguments or environment differ from those the stored study measured gets a
study of its own (``<name>-<hash>``): earlier trials must not answer its configurations, nor share
a best with its measurements.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError
from autotune.objectives import Objective
from autotune.storage.optuna_storage import open_study
from autotune.storage.attrs import StudyAttrs, write

if TYPE_CHECKING:
    import optuna

    from autotune.study.options import StudyOptions


@dataclass(frozen=True)
class Identity:
    """What a study's trials measured: the script's contents, its arguments and the environment's key."""

    script: Path
    args: list[str]
    script_sha256: str
    environment_key: str

    @classmethod
    def of(cls, script: Path, args: list[str], provenance: dict[str, Any]) -> Identity:
        from autotune.cache import environment_key

        return cls(script, list(args), provenance["script_sha256"], environment_key(provenance))

    def attrs(self) -> dict[str, Any]:
        """As the study's attributes keep it (the arguments are kept as ``args``)."""
        return {"script_sha256": self.script_sha256, "environment_key": self.environment_key}

    def digest(self) -> str:
        doc = {**self.attrs(), "args": self.args}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def changed(self, attrs: StudyAttrs) -> list[str]:
        """What differs between the stored study's script, arguments and environment and this run's."""
        if attrs.target is None or attrs.script_sha256 is None:
            return []
        return [what for what, differs in (
            (f"the script {self.script.name}", attrs.script_sha256 != self.script_sha256),
            ("its arguments", list(attrs.args or []) != self.args),
            ("the environment (versions, device, env vars)", attrs.environment_key != self.environment_key),
        ) if differs]


def open_tuning_study(storage: optuna.storages.BaseStorage, name: str, sampler: optuna.samplers.BaseSampler, *,
                      identity: Identity, target: str, objectives: list[Objective], options: StudyOptions,
                      space_source: str, notes: list[str]) -> tuple[optuna.Study, str]:
    """The study ``name`` (or its own ``<name>-<hash>``, see above) in ``storage``, checked and with
    this run's attributes written; returns it and its name. What a user should know goes to ``notes``."""
    names = [o.name for o in objectives]
    directions = [o.direction for o in objectives]
    study, opened = open_study(storage, name, directions, sampler, fresh=options.fresh)
    notes.extend(opened)
    attrs = StudyAttrs.of(study)
    changed = identity.changed(attrs)
    if changed:
        old, name = name, f"{name}-{identity.digest()[:8]}"
        study, _ = open_study(storage, name, directions, sampler, fresh=False)
        attrs = StudyAttrs.of(study)
        if identity.changed(attrs):
            raise AutotuneError(f"study {name!r} measured another script or environment; "
                                "choose another --study name")
        notes.append(f"{' and '.join(changed)} changed since study {old} was measured: "
                     f"this run measures study {name}")
    if attrs.target not in (None, target):
        raise AutotuneError(f"study {name!r} tunes target {attrs.target!r}, not {target!r}; "
                            "choose another --study name")
    had = [d.name.lower() for d in study.directions]
    if attrs.target is not None and (had != directions or (attrs.objectives or [attrs.metric]) != names):
        was = ", ".join(f"{n} ({d})" for n, d in zip(attrs.objectives or [attrs.metric], had))
        raise AutotuneError(f"study {name!r} was created to optimise {was}; choose another --study "
                            "name to change what it optimises")
    write(study, loss_tolerance=options.loss_tolerance, numerics_guard=options.numerics_guard,
          constraints=list(options.constraint), prefer=options.prefer or names[0])
    if attrs.target is None:
        # One attribute at a time, the target last: a driver that opens the study meanwhile
        # sees no target (and writes the same), never a target without its objectives.
        write(study, metric=names[0], objectives=names, script=str(identity.script), args=identity.args,
              space=space_source, **identity.attrs())
        write(study, target=target)
    elif attrs.script_sha256 is None:  # made before studies kept what they measured: from now on
        write(study, **identity.attrs())
    return study, name
