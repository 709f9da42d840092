"""The noisy neighbour of the benchmarks (bench/lib/neighbour.py) burns a core while a benchmark
measures beside it, and is gone afterwards, also when the benchmark fails."""

from __future__ import annotations

import time

import pytest

from bench.lib.neighbour import beside_a_neighbour


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def test_the_neighbour_burns_while_the_block_runs_and_is_stopped_when_it_fails() -> None:
    with pytest.raises(RuntimeError), beside_a_neighbour() as neighbour:
        assert neighbour is not None and neighbour.is_alive()
        time.sleep(6)  # busy 1-4 s, idle 1-4 s: within 6 s it has been busy for a while
        assert _cpu_seconds(neighbour.pid) > 0.5
        raise RuntimeError("the benchmark failed")
    assert not neighbour.is_alive()


def test_no_neighbour_where_none_is_asked_for() -> None:
    with beside_a_neighbour(False) as neighbour:
        assert neighbour is None
