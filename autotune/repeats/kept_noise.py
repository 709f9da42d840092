"""The between-run noise a study takes from the cache root and leaves there for the next study of
the same script on this machine and target.

A race (``--race``) needs to know how far two runs of one configuration differ before it has
measured any twice; what the earlier studies here measured is the best first guess (:mod:`.racing`'s
prior). Each study keeps its own entry, so a study continued later replaces what it left before
instead of counting it twice.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.cache import CacheRoot, noise_key
from autotune.disk_space import on_no_space
from autotune.measurement.noise import RunNoise
from autotune.results.standings import standings
from autotune.storage.attrs import write

if TYPE_CHECKING:
    import optuna


class KeptNoise:
    """The noise of one study in the cache root: the key of the script on this machine and target,
    and the study's own entry (its storage and name, hashed: a URL may hold a password)."""

    def __init__(self, cache: CacheRoot, provenance: dict[str, Any], target: str, storage_url: str,
                 name: str) -> None:
        self.cache = cache
        self.key = noise_key(provenance, target)
        self.own = hashlib.sha256(f"{storage_url}#{name}".encode()).hexdigest()[:16]

    def write_prior(self, study: optuna.Study) -> None:
        """Give ``study`` the noise the other studies here measured, as its prior (:func:`.racing.prior`)."""
        kept = self.cache.get_noise(self.key, besides=self.own)
        write(study, noise_prior=[kept.squares, kept.df] if kept.known else None)

    def keep(self, study: optuna.Study, full: Callable[[Path], None]) -> None:
        """Keep the noise this study measured, for the next study here; ``full(root)`` where the
        cache root has no space left for it."""
        with on_no_space(self.cache.path, full):
            self.cache.put_noise(self.key, self.own, RunNoise.of(s.runs.values for s in standings(study)))
