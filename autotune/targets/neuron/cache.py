"""The Neuron compile caches under autotune's cache root: where each path's artifacts go."""

from __future__ import annotations

import os
import re

from autotune.errors import InvalidConfigError
from autotune.targets.neuron.flags import PATHS

# ---------------------------------------------------------------------------------------------
# Caches and devices


def compile_cache_env(cache_root: str, compiler_version: str | None, path: str) -> dict[str, str]:
    """The env vars that put a trial's compiled artifacts under ``cache_root``.

    XLA path: ``NEURON_COMPILE_CACHE_URL`` is ``<cache_root>/neuron-compile-cache`` (the cache
    makes its own ``neuronxcc-<version>/`` level, so ``compiler_version`` is not needed), or an
    ``s3://`` root unchanged. A ``--cache_dir=`` in ``NEURON_CC_FLAGS`` would still win over it.
    Native path: ``TORCH_NEURONX_NEFF_CACHE_DIR`` is ``<cache_root>/neff-<compiler version>``,
    because that cache's key does not include the compiler version and two versions must never
    share entries.
    """
    if path == "xla":
        if cache_root.startswith("s3://"):
            return {"NEURON_COMPILE_CACHE_URL": cache_root}
        return {"NEURON_COMPILE_CACHE_URL": os.path.join(cache_root, "neuron-compile-cache")}
    if path == "native":
        if cache_root.startswith("s3://"):
            raise InvalidConfigError(
                f"the native path's NEFF cache is a directory (local or shared, e.g. NFS), not "
                f"{cache_root!r}; use a directory as the cache root for the native path"
            )
        version = re.sub(r"[^\w.+-]", "_", compiler_version) if compiler_version else "unknown"
        return {"TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(cache_root, f"neff-{version}")}
    raise InvalidConfigError(f"path {path!r} is not one of {', '.join(PATHS)}")
