"""The process count of a trial as a parameter of the space: ``--set nproc_per_node=2`` runs every
trial on two processes, ``--set nproc_per_node=1,2`` lets the study choose (``--nproc-per-node 2``
is the first). No built-in space lists it: a user adds it, and only then does it exist, so that a
space's configurations and their keys stay as they were for trials of one process.

The node count of a trial (``--nnodes``) is a parameter the same way, where it is above one, with
one value for the whole study: the world size changes what is measured, so it keys the result and
the compiled graphs, and a study's trials all hold as many nodes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autotune.errors import InvalidConfigError
from autotune.records import NODES_PARAM, PROCESSES_PARAM
from autotune.space.choices import with_choices
from autotune.space.parameters import Parameter
from autotune.space.search_space import SearchSpace


def with_processes(space: SearchSpace, sets: dict[str, Any], nproc_per_node: int = 1,
                   nnodes: int = 1) -> tuple[SearchSpace, dict[str, Any]]:
    """``space`` with the process count as a parameter where ``sets`` or ``nproc_per_node`` ask for
    one, and the node count where ``nnodes`` (or ``sets``) is above one, and each parameter that
    ``sets`` gives a list of values narrowed to them (:mod:`.choices`); ``sets`` less those lists
    (the study chooses among their values)."""
    space, sets = _with_nodes(space, sets, nnodes)
    value = sets.get(PROCESSES_PARAM, nproc_per_node if nproc_per_node > 1 else None)
    if value is None or PROCESSES_PARAM in space.parameters:
        return with_choices(space, sets)
    try:
        counts: tuple[int, ...] = tuple(sorted({int(v) for v in str(value).split(",")}))
    except ValueError:
        counts = ()
    if not counts or counts[0] < 1:
        raise InvalidConfigError(f"--set {PROCESSES_PARAM}={value}: a process count, or several separated by "
                                 "commas, e.g. 2 or 1,2")
    # The fewest processes are the baseline: a script written for torchrun cannot run without it.
    fewest = counts[0]
    param = Parameter(PROCESSES_PARAM, "int", choices=counts, default=fewest,
                      description="processes of the trial (torchrun --nproc_per_node); the batch size is each one's")
    rest = {k: v for k, v in sets.items() if k != PROCESSES_PARAM}
    return with_choices(replace(space, parameters={**space.parameters, PROCESSES_PARAM: param}),
                        rest if len(counts) > 1 else {**rest, PROCESSES_PARAM: fewest})


def _with_nodes(space: SearchSpace, sets: dict[str, Any], nnodes: int) -> tuple[SearchSpace, dict[str, Any]]:
    value = str(sets.get(NODES_PARAM, nnodes))
    if not value.isdigit() or int(value) < 1:
        raise InvalidConfigError(f"--nnodes {value}: one node count for the whole study, e.g. 2 (its trials all "
                                 "hold as many nodes)")
    rest = {k: v for k, v in sets.items() if k != NODES_PARAM}
    count = int(value)
    if count == 1 or NODES_PARAM in space.parameters:
        return space, rest if count == 1 else sets
    param = Parameter(NODES_PARAM, "int", choices=(count,), default=count,
                      description="nodes of the trial (torchrun --nnodes), each running the trial's processes")
    return replace(space, parameters={**space.parameters, NODES_PARAM: param}), {**rest, NODES_PARAM: count}


def most_processes(space: SearchSpace) -> int:
    """The most processes a trial of ``space`` runs: what a worker must hold devices for."""
    param = space.parameters.get(PROCESSES_PARAM)
    return int(max(param.choices or (1,))) if param is not None else 1


def trial_nodes(space: SearchSpace) -> int:
    """The nodes each trial of ``space`` holds."""
    param = space.parameters.get(NODES_PARAM)
    return int((param.choices or (1,))[0]) if param is not None else 1
