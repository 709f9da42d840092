"""Figures as people write them: memory sizes (``8GiB``, ``512M``)."""

from __future__ import annotations

import re

from autotune.errors import InvalidConfigError

#: The largest size accepted: an exbibyte.
LARGEST = 1024 ** 6


def parse_size(text: str) -> int:
    """``"8GiB"``, ``"512M"``, ``"1e9"`` as bytes; anything else is an error naming the form."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([KMGT]?)(i?B?)\s*", text, re.IGNORECASE)
    if not m:
        raise InvalidConfigError(f"memory size {text!r}: use a number with an optional unit, e.g. 8GiB or 512M")
    value = float(m.group(1))
    unit = m.group(2).upper()
    if unit:  # K, M, G, T and KiB, MiB, ... are all binary here: memory is counted in pages
        value *= 1024 ** ("KMGT".index(unit) + 1)
    if value < 1:
        raise InvalidConfigError(f"memory size {text!r} must be positive")
    if not value <= LARGEST:  # 1e400 is infinite as a float, and no limit of the kernel's takes over 2**63
        raise InvalidConfigError(f"memory size {text!r} is larger than any machine's memory (at most 1EiB)")
    return int(value)
