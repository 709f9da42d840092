"""Remembers inductor's CPU vector-ISA probe in the cache root.

Before its first CPU kernel, every process that compiles with inductor checks each vector ISA
the CPU claims (AVX2, AVX-512, ...) by building a small library, which inductor's own cache
keeps, and then loading it in a fresh Python that imports torch: seconds an ISA
(docs/results/trial.md#inductors-vector-isa-probe), paid again by every trial, cold or warm, even
when every graph comes from the cache.

The answer depends only on the compiler, the ISA flags, torch's version and the CPU, which is
exactly the key recorded here. Only successful probes are remembered: a failed one is cheap to
repeat and may have been transient. The probe is not an inductor config option, so remembering it
does not change any graph's cache key.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.atomic_file import write_atomic

if TYPE_CHECKING:
    from torch._inductor.cpu_vec_isa import VecISA

MEMO_NAME = "autotune-vec-isa.json"


def install(cache_dir: str | None) -> bool:
    """Wrap inductor's ISA probe with a memo under ``cache_dir``. False where it cannot be done."""
    if not cache_dir:
        return False
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return False
    probe = getattr(cpu_vec_isa.VecISA, "check_build", None)
    fingerprint = getattr(cpu_vec_isa, "_get_isa_dry_compile_fingerprint", None)
    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    if probe is None or fingerprint is None or checker is None or getattr(probe, "_autotune_memo", False):
        return False
    memo = Path(cache_dir) / MEMO_NAME

    def check_build(isa: VecISA, code: str) -> bool:
        try:
            key = _key(fingerprint(isa.build_arch_flags()), str(isa), checker(), code)
        except Exception:  # a torch whose internals moved: probe as torch would
            return probe(isa, code)
        if _read(memo).get(key) is True:
            return True
        ok = probe(isa, code)
        if ok:
            _remember(memo, key)
        return ok

    check_build._autotune_memo = True  # type: ignore[attr-defined]
    cpu_vec_isa.VecISA.check_build = check_build  # type: ignore[method-assign]
    return True


def _key(fingerprint: str, isa: str, cpu_isas: list[str], code: str) -> str:
    text = json.dumps([fingerprint, isa, platform.machine(), sorted(cpu_isas),
                       hashlib.sha256(code.encode()).hexdigest()])
    return hashlib.sha256(text.encode()).hexdigest()


def _read(memo: Path) -> dict[str, Any]:
    try:
        data = json.loads(memo.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(memo: Path, key: str) -> None:
    """Add ``key``; atomic, so a reader never sees half a file. Two writers at once may drop
    each other's entry, which only costs the next trial a probe."""
    try:
        data = _read(memo)
        data[key] = True
        write_atomic(memo, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass
