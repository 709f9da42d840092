"""The Neuron compile caches under autotune's cache root: where each path's artifacts go, and the
XLA path's persistent cache layout read back (entries done, failed, locked; the flags of each).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import InvalidConfigError
from autotune.targets.neuron.flags import PATHS, WRAPPER_FLAGS

CACHE_URL_ENV = "NEURON_COMPILE_CACHE_URL"
#: The folder of the cache root that is NEURON_COMPILE_CACHE_URL (XLA path).
XLA_CACHE_DIR = "neuron-compile-cache"
#: The folder of the cache root that keeps models traced by ``torch_neuronx.trace`` (TorchScript,
#: one file per model, compiler arguments and versions).
TRACED_CACHE_DIR = "neuron-traced"
#: A lock older than this is left over from a compile that died.
STALE_LOCK_SECONDS = 3600

# ---------------------------------------------------------------------------------------------
# Caches and devices


def compile_cache_env(cache_root: str, compiler_version: str | None, path: str,
                      exported_url: str | None = None) -> dict[str, str]:
    """The env vars that put a trial's compiled artifacts under ``cache_root``.

    XLA path: ``NEURON_COMPILE_CACHE_URL`` is ``<cache_root>/neuron-compile-cache`` (the cache
    makes its own ``neuronxcc-<version>/`` level, so ``compiler_version`` is not needed). An
    ``s3://`` URL the user exported (``exported_url``) is how a fleet shares its NEFFs: it passes
    through unchanged, since the Neuron cache reads and writes S3 itself, while autotune's results
    and manifests stay under ``cache_root``. A ``--cache_dir=`` in ``NEURON_CC_FLAGS`` would still
    win over either. Native path: ``TORCH_NEURONX_NEFF_CACHE_DIR`` is
    ``<cache_root>/neff-<compiler version>``, because that cache's key does not include the
    compiler version and two versions must never share entries.
    """
    if path == "xla":
        if exported_url and exported_url.startswith("s3://"):
            return {CACHE_URL_ENV: exported_url}
        return {CACHE_URL_ENV: os.path.join(cache_root, XLA_CACHE_DIR)}
    if path == "native":
        version = re.sub(r"[^\w.+-]", "_", compiler_version) if compiler_version else "unknown"
        return {"TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(cache_root, f"neff-{version}")}
    raise InvalidConfigError(f"path {path!r} is not one of {', '.join(PATHS)}")


@dataclass
class NeuronCacheEntry:
    """``neuronxcc-<version>/MODULE_<graph hash>+<flag hash>/`` of the Neuron persistent cache."""

    path: Path
    compiler_version: str
    graph_hash: str
    flag_hash: str
    state: str  # done, failed, locked, stale_lock, incomplete
    flags: list[str] | None = None
    size: int = 0
    mtime: float = 0.0


_MODULE = re.compile(r"MODULE_([^+]+)\+(.+)")


def neuron_cache_entries(root: Path) -> list[NeuronCacheEntry]:
    """Entries of a Neuron persistent cache directory, each with its state.

    A compiled entry has ``model.neff`` and ``model.done``; a failed one has ``model.log`` and no
    NEFF; one being compiled holds a ``*.lock`` (stale when older than an hour).
    """
    out: list[NeuronCacheEntry] = []
    if not root.is_dir():
        return out
    now = time.time()
    for version_dir in sorted(root.glob("neuronxcc-*")):
        for module in sorted(version_dir.glob("MODULE_*")):
            m = _MODULE.fullmatch(module.name)
            if not m or not module.is_dir():
                continue
            files = {p.name: p for p in module.iterdir()}
            locks = [p for n, p in files.items() if n.endswith(".lock")]
            if "model.neff" in files and "model.done" in files:
                state = "done"
            elif locks:
                oldest = min(p.stat().st_mtime for p in locks)
                state = "stale_lock" if now - oldest > STALE_LOCK_SECONDS else "locked"
            elif "model.log" in files and "model.neff" not in files:
                state = "failed"
            else:
                state = "incomplete"
            flags = None
            if "compile_flags.json" in files:
                try:
                    raw = json.loads(files["compile_flags.json"].read_text())
                    flags = [str(f) for f in raw] if isinstance(raw, list) else _flag_list(str(raw))
                except (OSError, ValueError):
                    flags = None
            size = sum(p.stat().st_size for p in files.values() if p.is_file())
            mtime = max((p.stat().st_mtime for p in files.values()), default=module.stat().st_mtime)
            out.append(NeuronCacheEntry(module, version_dir.name[len("neuronxcc-"):], m.group(1), m.group(2),
                                        state, flags, size, mtime))
    return out


def _flag_list(flags: str) -> list[str]:
    return flags.split()


def _compiler_flags(flags: list[str]) -> list[str]:
    """Flags as the compiler sees them: the wrapper's own flags are not part of a compile."""
    return [f for f in flags if not f.split("=", 1)[0] in WRAPPER_FLAGS]


def failed_entry(root: Path, flags: str | None) -> NeuronCacheEntry | None:
    """A failed entry of the persistent cache at ``root`` compiled with exactly ``flags``."""
    if flags is None:
        return None
    wanted = _compiler_flags(_flag_list(flags))
    for entry in neuron_cache_entries(root):
        if entry.state == "failed" and entry.flags is not None and _compiler_flags(entry.flags) == wanted:
            return entry
    return None
