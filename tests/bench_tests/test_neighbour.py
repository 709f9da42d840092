"""The noisy neighbour of the benchmarks (bench/lib/neighbour.py) burns a core while a benchmark
measures beside it, and is gone afterwards, also when the benchmark fails."""

from __future__ import annotations

import time

import psutil
import pytest

from bench.lib.neighbour import beside_a_neighbour


def test_the_neighbour_burns_while_the_block_runs_and_is_stopped_when_it_fails() -> None:
    with pytest.raises(RuntimeError), beside_a_neighbour() as neighbour:
        assert neighbour is not None and neighbour.is_alive()
        # It begins busy (1-4 s): it has burned a fifth of a second as soon as it gets the CPU.
        deadline, burned = time.monotonic() + 60, 0.0
        while burned < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
            cpu = psutil.Process(neighbour.pid).cpu_times()
            burned = cpu.user + cpu.system
        assert burned >= 0.2
        raise RuntimeError("the benchmark failed")
    assert neighbour is not None and not neighbour.is_alive()


def test_no_neighbour_where_none_is_asked_for() -> None:
    with beside_a_neighbour(False) as neighbour:
        assert neighbour is None
