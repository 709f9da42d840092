"""The keys that identify a configuration: one for the configuration itself (a study measures each
once, the cache remembers its result under it), one for the graphs it compiles."""

from __future__ import annotations

import json
from typing import Any

#: Parameters that do not change the compiled graphs: a configuration that differs from a
#: compiled one only in these finds its graphs in the compile cache.
RUNTIME_ONLY_PARAMS = frozenset({"num_workers"})


def config_key(params: dict[str, Any]) -> str:
    """The canonical key of a configuration: sorted JSON of its set parameters (``None``, the
    script's own value, left out, as canonical configurations leave it out)."""
    return json.dumps({k: params[k] for k in sorted(params) if params[k] is not None},
                      sort_keys=True, separators=(",", ":"))


def compile_key(params: dict[str, Any], runtime_only: frozenset[str] | set[str] = RUNTIME_ONLY_PARAMS) -> str:
    """The key of the graphs ``params`` compiles: its configuration less the runtime-only parameters."""
    return config_key({k: v for k, v in params.items() if k not in runtime_only})
