"""The cache root: compiled artifacts of every target, and the results already measured.

Layout under the root (``--cache DIR``, default ``$XDG_CACHE_HOME/autotune``)::

    inductor/               TORCHINDUCTOR_CACHE_DIR, shared by every trial (AUTOTUNE_INDUCTOR_CACHE: elsewhere)
    neuron-compile-cache/   NEURON_COMPILE_CACHE_URL (Neuron XLA path, unless the user exported an s3:// one)
    neff-<compiler>/        TORCH_NEURONX_NEFF_CACHE_DIR (Neuron native path; one per compiler)
    xla-<device>/           torch-xla's persistent cache where the device can read it back
    results/<kk>/<key>.json measured results, keyed by model, environment, configuration, protocol
    noise/<kk>/<key>.json   the between-run noise studies measured, keyed by model, environment, target

Every write is a rename of a complete temporary file, so a killed trial never leaves a
half-written entry that a later one trusts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError
from autotune.measurement.noise import RUN_SECONDS, RunNoise
from autotune.published import PUBLISHED_DIR, Published
from autotune.records import PROTOCOL_VERSION, FailureCategory, TrialResult
from autotune.targets import all_targets, get_target
from autotune.targets.base import directory_usage


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"


def open_cache(root: str | Path | None) -> CacheRoot:
    """The cache root, created if needed; a clear error if it cannot be written."""
    path = Path(root) if root else default_cache_root()
    if str(path).startswith("s3:"):
        raise AutotuneError("--cache is a directory (local or shared); an s3:// compile cache for the "
                            "Neuron XLA path is passed with NEURON_COMPILE_CACHE_URL")
    try:
        (path / "results").mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise AutotuneError(f"cannot write to the cache {path}: {exc.strerror}; choose another --cache") from None
    return CacheRoot(path.resolve())


def result_key(*, model: dict[str, Any], environment: dict[str, Any], target: str,
               params: dict[str, Any], protocol_version: int = PROTOCOL_VERSION,
               devices_per_trial: int | None = None) -> str:
    """The key of a measured result. Any change of script, arguments, package or compiler version,
    device, instance type, the env vars the target reads, configuration, devices a trial holds or
    measurement protocol gives another key."""
    doc = {"model": model, "environment": environment, "target": target, "params": params,
           "protocol": protocol_version, "devices_per_trial": devices_per_trial}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def artifact_key(*, model: dict[str, Any], environment: dict[str, Any], target: str, graphs: str,
                 env: dict[str, str]) -> str:
    """The key of a configuration's compiled graphs (:mod:`autotune.published`): the same script,
    environment and target, the same ``graphs`` (:func:`autotune.space.compile_key`) and the same
    compiler env vars compile the same graphs."""
    doc = {"model": model, "environment": environment, "target": target, "graphs": graphs, "env": env}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def noise_key(provenance: dict[str, Any], target: str) -> str:
    """The key of the between-run noise of a script (its provenance's :func:`model_of`) on a machine
    (:func:`environment_of`) and target: the same script on the same machine varies alike whatever
    its configuration. The spread is kept for a run of ``RUN_SECONDS`` (an older entry, kept for a
    run of any length, is not read)."""
    doc = {"model": model_of(provenance), "environment": environment_of(provenance), "target": target,
           "run_seconds": RUN_SECONDS}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def environment_of(provenance: dict[str, Any]) -> dict[str, Any]:
    """The part of a study's provenance that decides whether a result still holds."""
    return {k: provenance.get(k) for k in ("versions", "device", "host_device", "instance_type", "cpu_count",
                                           "env")}


def environment_key(provenance: dict[str, Any]) -> str:
    """:func:`environment_of` as one short text, for a study to compare with its earlier runs'."""
    return hashlib.sha256(json.dumps(environment_of(provenance), sort_keys=True, default=str).encode()).hexdigest()


def model_of(provenance: dict[str, Any]) -> dict[str, Any]:
    return {"script_sha256": provenance.get("script_sha256"), "args": provenance.get("script_args")}


@dataclass
class CacheRoot:
    path: Path

    @property
    def results_dir(self) -> Path:
        return self.path / "results"

    # -- results -----------------------------------------------------------------------------
    def _result_path(self, key: str) -> Path:
        return self.results_dir / key[:2] / f"{key}.json"

    def get_result(self, key: str) -> TrialResult | None:
        try:
            return TrialResult.model_validate_json(self._result_path(key).read_text())
        except (OSError, ValueError):
            return None

    def put_result(self, key: str, result: TrialResult) -> bool:
        """Remember ``result`` if it would hold next time (a success, or a deterministic failure).
        Out of device memory is the configuration's own only where its trial had its devices to
        itself (:meth:`autotune.targets.base.Target.held_alone`): trials that shared a GPU, or ran
        with no placement, may have run out of each other's memory."""
        if not result.ok and (result.failure is None or not result.failure.category.remembered):
            return False
        if result.failure is not None and result.failure.category is FailureCategory.device_oom \
                and not get_target(result.plan.target).held_alone(result.placement):
            return False
        write_atomic(self._result_path(key), result.model_dump_json())
        return True

    # -- between-run noise ------------------------------------------------------------------
    #: Studies whose noise a file keeps at most: the newest (the machine as it is lately).
    NOISE_STUDIES = 20

    def _noise_path(self, key: str) -> Path:
        return self.path / "noise" / key[:2] / f"{key}.json"

    def _noise_entries(self, key: str) -> dict[str, list[float]]:
        try:
            entries = json.loads(self._noise_path(key).read_text())
            return {k: [float(v[0]), float(v[1])] for k, v in entries.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError):
            return {}

    def get_noise(self, key: str, *, besides: str | None = None) -> RunNoise:
        """The noise the studies measured under ``key`` pooled, but for the study ``besides``
        (a study continued does not count its own repeats twice)."""
        noise = RunNoise()
        for study, (squares, df) in self._noise_entries(key).items():
            if study != besides and df > 0:
                noise += RunNoise(squares, int(df))
        return noise

    def put_noise(self, key: str, study: str, noise: RunNoise) -> None:
        """Keep what ``study`` measured of the noise (it replaces that study's earlier entry)."""
        if not noise.known:
            return
        entries = self._noise_entries(key)
        entries.pop(study, None)
        entries[study] = [noise.squares, noise.df]
        write_atomic(self._noise_path(key), json.dumps(dict(list(entries.items())[-self.NOISE_STUDIES:])))

    def iter_results(self) -> Iterator[tuple[Path, TrialResult | None]]:
        for p in sorted(self.results_dir.glob("*/*.json")):
            try:
                yield p, TrialResult.model_validate_json(p.read_text())
            except (OSError, ValueError):
                yield p, None



# -- stats, prune, clear --------------------------------------------------------------------------

@dataclass
class CacheStats:
    root: str
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "sections": self.sections}


def cache_stats(cache: CacheRoot) -> CacheStats:
    stats = CacheStats(str(cache.path))
    results = list(cache.iter_results())
    hits = misses = 0
    by_status: dict[str, int] = {}
    by_target: dict[str, int] = {}
    for _, r in results:
        if r is None:
            by_status["unreadable"] = by_status.get("unreadable", 0) + 1
            continue
        status = "ok" if r.ok else (r.failure.category.value if r.failure else "failed")
        by_status[status] = by_status.get(status, 0) + 1
        by_target[r.plan.target] = by_target.get(r.plan.target, 0) + 1
        hits += r.compile.cache_hits or 0
        misses += r.compile.cache_misses or 0
    _, rsize = directory_usage(cache.results_dir)
    stats.sections["results"] = {"entries": len(results), "by_target": by_target, "by_status": by_status,
                                 "compile_cache_hits": hits, "compile_cache_misses": misses, "bytes": rsize}
    for target in all_targets():
        stats.sections.update(target.cache_sections(cache.path))
    return stats


def _prunable(cache: CacheRoot) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of each unit that can be removed on its own."""
    units: list[tuple[float, int, Path]] = []
    for p, _ in cache.iter_results():
        st = p.stat()
        units.append((st.st_mtime, st.st_size, p))
    for target in all_targets():
        units.extend(target.cache_units(cache.path))
    return units


def prune(cache: CacheRoot, *, max_size: int | None = None, older_than: float | None = None) -> tuple[int, int]:
    """Remove entries older than ``older_than`` seconds, then the oldest until under ``max_size``.

    Returns (entries removed, bytes freed).
    """
    units = sorted(_prunable(cache))
    now = time.time()
    gone: list[Path] = []
    freed = 0
    keep: list[tuple[float, int, Path]] = []
    for mtime, size, path in units:
        if older_than is not None and now - mtime > older_than:
            _remove(path)
            gone, freed = gone + [path], freed + size
        else:
            keep.append((mtime, size, path))
    if max_size is not None:
        total = sum(size for _, size, _ in keep)
        for mtime, size, path in keep:
            if total <= max_size:
                break
            _remove(path)
            total -= size
            gone, freed = gone + [path], freed + size
    if any(cache.results_dir not in path.parents for path in gone):
        # A manifest does not list its graphs, so any compiled artifact removed may be one of any
        # configuration's: none may still say "compiled". A compile job asked for one again finds
        # the graphs that are left in the target's cache and compiles only the missing ones.
        Published(cache.path).withdraw_all()
    return len(gone), freed


def own_sections(cache: CacheRoot) -> list[Path]:
    """The folders under the root that autotune made: its results and manifests, and each target's
    compiled artifacts (the top folder of every piece the target can remove). Nothing else is
    autotune's to remove: the root may be any folder (``--cache ~``)."""
    own = {cache.results_dir, cache.path / PUBLISHED_DIR, cache.path / "noise"}
    for target in all_targets():
        for _, _, path in target.cache_units(cache.path):
            try:
                own.add(cache.path / path.relative_to(cache.path).parts[0])
            except ValueError:  # outside the root (never here: the targets' units are under it)
                continue
    return sorted(p for p in own if p.exists())


def clear(cache: CacheRoot) -> int:
    """Remove autotune's sections of the cache root (:func:`own_sections`), nothing else in it;
    returns the bytes freed."""
    size = 0
    for section in own_sections(cache):
        size += directory_usage(section)[1]
        _remove(section)
    (cache.results_dir).mkdir(parents=True, exist_ok=True)
    return size


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"`` as seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise AutotuneError(f"age {text!r}: use a number with s, m, h, d or w, e.g. 7d")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
