"""The by-hand method: one knob at a time in the space's order, each change kept when it helps."""

from __future__ import annotations

from autotune.landscapes.landscape import ConfigRecord, Landscape
from autotune.search.configurations import enumerate_space
from autotune.space import config_key, parse_space
from bench.lib.by_hand import ByHandSampler, next_by_hand
from bench.lib.simulate import simulate

SPACE = """\
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32, 64], default: 16}
  mode: {type: categorical, choices: [eager, default], default: eager}
  cpp_simdlen: {type: int, choices: [256, 512], when: {mode: [default]}}
  precision: {type: categorical, choices: [fp32, bf16_autocast], default: fp32}
"""


def speed(c: dict) -> float | None:
    if c["batch_size"] == 64:
        return None  # fails: never kept
    return (c["batch_size"] * (1.3 if c["mode"] == "default" else 1.0)
            * {None: 1.0, 256: 0.9, 512: 1.1}[c.get("cpp_simdlen")] * (0.5 if c["precision"] != "fp32" else 1.0))


def c(bs: int, mode: str = "eager", simd: int | None = None, precision: str = "fp32") -> dict:
    out = {"batch_size": bs, "mode": mode, "precision": precision}
    return out | ({"cpp_simdlen": simd} if simd else {})


#: Pass 1: batch size (32 helps, 64 fails), mode (default helps), cpp_simdlen, which applies
#: now (512 helps), precision (bf16 does not). Pass 2 tries what pass 1 did not (batch 16 and 64
#: with the rest as kept) and changes nothing: the method ends.
EXPECTED = [c(16), c(32), c(64), c(32, "default"), c(32, "default", 256), c(32, "default", 512),
            c(32, "default", 512, "bf16_autocast"), c(16, "default", 512), c(64, "default", 512)]


def test_one_knob_at_a_time_in_the_spaces_order() -> None:
    space = parse_space(SPACE)
    measured: dict[str, float | None] = {}
    tried = []
    while (config := next_by_hand(space, measured)) is not None:
        assert config_key(config) not in measured
        tried.append(config)
        measured[config_key(config)] = speed(config)
    assert tried == EXPECTED


def test_the_sampler_runs_the_method_in_a_study() -> None:
    space = parse_space(SPACE)
    records = [ConfigRecord(index=i, params=p, status="ok" if speed(p) else "failed", throughput=speed(p),
                            category=None if speed(p) else "crash", wall_seconds=10.0)
               for i, p in enumerate(enumerate_space(space))]
    land = Landscape({"target": "inductor", "space_yaml": SPACE}, records)
    trace = simulate(land, ByHandSampler(space), starting_points=[space.defaults()], max_trials=30)
    assert [s.key for s in trace.steps] == [config_key(x) for x in EXPECTED]
    assert trace.duplicates > 0, "once finished it proposes its best again, which costs nothing"
