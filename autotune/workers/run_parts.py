"""One run made of several processes of a script that ends too soon for a noisy host.

On a host whose runs vary from one to the next, a run measures at least
``MeasurementProtocol.min_measure_seconds`` of steady steps (:func:`autotune.measurement.noise.measure_seconds`),
so that it averages over a neighbour's turns instead of reading whichever second it fell in. A
script that ends on its own before that (one that runs a few epochs of a small model) is run
again, its graphs from the compile cache, and the run is what its processes measured together:
every process's samples over every process's seconds, as one process that went on that long would
have read (pyperf measures a benchmark in many processes for the same reason).
"""

from __future__ import annotations

import math
from typing import Sequence

from autotune.measurement.noise import RunNoise, Runs
from autotune.measurement.windows import t975
from autotune.records import Measurement, MeasurementProtocol

#: The most processes one run is made of. A script that measures too little per process to reach
#: the asked seconds in so many (a second per process, against 10 s asked) runs once, as before: it
#: would cost five processes' start and warm-up for a run still short of what the host asks.
MAX_PROCESSES = 5


def short(m: Measurement | None, protocol: MeasurementProtocol, *, stopped_early: bool) -> bool:
    """Whether a run that ended with ``m`` measured fewer seconds than ``protocol`` asks, because
    the script ended on its own (a run the harness stopped had what it needed, or was capped or
    pruned)."""
    return (m is not None and not stopped_early and not m.pruned and not protocol.compile_only
            and protocol.min_measure_seconds > 0 and m.seconds < protocol.min_measure_seconds)


def reachable(m: Measurement, protocol: MeasurementProtocol) -> bool:
    """Whether :data:`MAX_PROCESSES` processes measuring as long as ``m`` did reach the seconds
    ``protocol`` asks."""
    return m.seconds * MAX_PROCESSES >= protocol.min_measure_seconds


def pooled(parts: Sequence[Measurement], protocol: MeasurementProtocol) -> Measurement:
    """The measurement of one run made of ``parts``, each one process's.

    The throughput is all their samples over all their seconds. The 95% interval adds each
    process's own as independent errors (as the phases of one run are added up,
    :func:`autotune.measurement.windows.estimate`), and is at least as wide as the spread of the
    processes' figures, with the study's between-run spread (``protocol.noise_squares``), says a
    mean of them is uncertain. Step times are the processes' averaged by
    their seconds; warm-up and the model's figures are the first process's (the later ones took
    their graphs from the compile cache)."""
    if len(parts) == 1:
        return parts[0]
    seconds = [m.seconds for m in parts]
    total = sum(seconds)
    samples = sum(m.throughput * s for m, s in zip(parts, seconds))
    throughput = samples / total
    rel = [m.rel_half_width for m in parts]
    half = throughput * math.sqrt(sum((s * r) ** 2 for s, r in zip(seconds, rel))) / total
    # The processes' spread, weighed with the between-run spread the study measured so far: two
    # processes alone give one degree of freedom, a t of 12.7, and an interval of x100 either way
    # where a neighbour slowed one of them.
    runs = Runs(tuple(m.throughput for m in parts), seconds=tuple(seconds))
    noise = RunNoise.of([runs]) + RunNoise(protocol.noise_squares, protocol.noise_df)
    if noise.sigma is not None:
        half = max(half, throughput * math.expm1(t975(noise.df) * math.sqrt(runs.log_variance(noise)[0])))

    def weighed(values: Sequence[float | None]) -> float | None:
        if any(v is None for v in values):
            return None
        return sum(v * s for v, s in zip(values, seconds) if v is not None) / total

    first = parts[0]
    windows = sum(m.windows for m in parts)
    return first.model_copy(update={
        "throughput": throughput,
        "ci95_low": max(0.0, throughput - half),
        "ci95_high": throughput + half,
        "step_time_median": weighed([m.step_time_median for m in parts]),
        "step_time_p90": weighed([m.step_time_p90 for m in parts]),
        "step_time_p99": weighed([m.step_time_p99 for m in parts]),
        "samples_per_step": samples / sum(m.steps_measured for m in parts) if any(m.steps_measured for m in parts)
        else first.samples_per_step,
        "steps_measured": sum(m.steps_measured for m in parts),
        "windows": windows,
        "converged": (total >= protocol.min_measure_seconds and windows >= protocol.min_windows
                      and half / throughput <= protocol.rel_ci),
        "phases": max(m.phases for m in parts),
        "processes": len(parts),
    })
