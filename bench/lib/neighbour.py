"""A noisy neighbour, as on a shared host: a process that burns one core on and off (busy, then
idle, 1-4 s each at random) for as long as a benchmark measures beside it."""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import time
from collections.abc import Iterator


def burn(seed: int) -> None:
    """One core busy, then idle, 1-4 s each at random, until killed."""
    rng = random.Random(seed)
    while True:
        end = time.monotonic() + rng.uniform(1, 4)
        while time.monotonic() < end:
            pass
        time.sleep(rng.uniform(1, 4))


@contextlib.contextmanager
def beside_a_neighbour(on: bool = True, seed: int = 1) -> Iterator[multiprocessing.Process | None]:
    """Run the block beside :func:`burn`, stopped when the block ends however it ends (nothing
    beside it where ``on`` is false). Yields the neighbour's process."""
    neighbour = multiprocessing.Process(target=burn, args=(seed,), daemon=True) if on else None
    if neighbour is not None:
        neighbour.start()
    try:
        yield neighbour
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.join()
