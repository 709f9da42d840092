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
        time.sleep(6)  # busy 1-4 s, idle 1-4 s: within 6 s it has been busy for a while
        cpu = psutil.Process(neighbour.pid).cpu_times()
        assert cpu.user + cpu.system > 0.5
        raise RuntimeError("the benchmark failed")
    assert neighbour is not None and not neighbour.is_alive()


def test_no_neighbour_where_none_is_asked_for() -> None:
    with beside_a_neighbour(False) as neighbour:
        assert neighbour is None
