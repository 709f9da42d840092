"""What a compile target must do.

A target turns a canonical configuration into a :class:`TrialPlan`: the env vars and compiler flags
that the trial process starts with, and the runtime knobs that the harness applies inside it.
Everything that knows a flag's spelling lives in the target's own module.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar, Mapping, MutableMapping, Sequence

from autotune.errors import InvalidConfigError
from autotune.machine.host import host_device
from autotune.measurement.failures import FailurePattern
from autotune.records import RuntimeKnobs, TrialPlan
from autotune.space import SearchSpace, builtin_space

#: A removable piece of a compile cache: (modification time, bytes, path).
CacheUnit = tuple[float, int, Path]


class Target(abc.ABC):
    #: The name users pass to ``--target``.
    name: ClassVar[str]
    #: What this target's compiler and runtime print when a configuration fails; checked, in
    #: order, before the host's strings (:func:`autotune.targets.failure_patterns`).
    failure_patterns: ClassVar[tuple[FailurePattern, ...]] = ()
    #: Built-in search spaces of this target, first one the default.
    spaces: ClassVar[tuple[str, ...]]
    #: The Ray resource through which a trial holds its devices (``neuron_cores``, ``GPU``), and
    #: what a person calls them; ``None`` for targets whose trials share the host's CPUs. The
    #: placement, the daemon's slots and the price of a trial count devices through it.
    device_resource: str | None = None
    device_noun: ClassVar[str] = "devices"
    #: The option that sets how many of them a trial holds, and the env var through which a
    #: trial's runtime sees the ones its placement gave it.
    device_flag: ClassVar[str | None] = None
    visible_devices: ClassVar[str | None] = None
    #: Env vars a user may export that change this target's results: each trial of a study gets the
    #: caller's values, and they are part of a result's key (and recorded with a landscape).
    environment: ClassVar[tuple[str, ...]] = ()
    #: The compiler flags, env vars and cache folders that only this target may write: nothing
    #: outside ``autotune/targets/`` spells one (``tests/targets_tests/test_target_knowledge.py``).
    spellings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, gpus_per_trial: int | None = None) -> None:
        """``gpus_per_trial``: ``--gpus-per-trial``, which only a target whose trials run on CUDA takes."""
        if gpus_per_trial:
            holds = f"{self.device_noun} ({self.device_flag}), not GPUs" if self.device_flag else "no GPUs"
            raise InvalidConfigError(f"--gpus-per-trial {gpus_per_trial}: the {self.name} target's trials hold "
                                     f"{holds}; leave it out (the inductor target's trials hold GPUs)")

    def devices_per_trial(self, cores_per_trial: int = 1, processes: int = 1) -> int:
        """How many of :attr:`device_resource` one trial of ``processes`` processes holds (0: none);
        ``cores_per_trial`` is ``--cores-per-trial``."""
        return 0

    def default_space(self, platform: str | None = None) -> SearchSpace:
        """The built-in space for ``platform`` (or the target's default one)."""
        return builtin_space(self.space_name(platform))

    def space_name(self, platform: str | None = None) -> str:
        return self.spaces[0]

    def fit_space(self, space: SearchSpace) -> SearchSpace:
        """``space`` as this machine's compiler runs it: only the values it knows, and what leaving
        a parameter unset gives with it (``unset_is``)."""
        return space

    @abc.abstractmethod
    def check(self, params: Mapping[str, Any]) -> None:
        """Reject combinations that cannot compile or run, before anything starts.

        Raises :class:`~autotune.errors.InvalidConfigError` with a message that names the fix.
        """

    @abc.abstractmethod
    def plan(self, params: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> TrialPlan:
        """The configuration as applied. ``params`` is canonical (validated by a space).

        ``base_env`` is the environment the trial would otherwise inherit; a target that appends to
        a variable the user already set (``XLA_FLAGS``, ``NEURON_CC_FLAGS``) reads it from there.
        """

    def result_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The variables of :attr:`environment` that ``environ`` sets, sorted by name."""
        return {k: environ[k] for k in sorted(self.environment) if k in environ}

    def cache_env(self, root: str, params: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
        """Env vars that put this target's compiled artifacts under the cache ``root``, and notes."""
        return {}, []

    def cached_plan(self, params: Mapping[str, Any], cache_root: str,
                    base_env: Mapping[str, str] | None = None) -> TrialPlan:
        """:meth:`plan`, with this target's compiler cache under ``cache_root`` in its env."""
        plan = self.plan(params, base_env)
        env, notes = self.cache_env(cache_root, params)
        plan.env.update(env)
        plan.notes.extend(notes)
        return plan

    def compile_ahead(self, plan: TrialPlan, platform: str | None = None) -> tuple[TrialPlan, TrialPlan] | None:
        """``plan`` split in two for ``--compile-workers``: the compile job, which compiles its
        graphs into the compile cache on a worker that may have no device (``platform``: the
        study's, for a target that must be told what to compile for), and the measure job, which
        finds them there; both compile exactly the same graphs with the same flags. ``None`` where
        this target's compiled graphs cannot be handed to a later process."""
        if not self.compile_cache_persists():
            return None
        return plan.model_copy(deep=True), plan

    def compile_job_note(self) -> str:
        """Why this target's configurations are not compiled ahead (when :meth:`compile_ahead` is ``None``)."""
        return f"the {self.name} target's compiled graphs are not read back by a later process: each trial compiles its own"

    def available(self) -> bool:
        """Whether this target can run trials on this machine."""
        return True

    def device_description(self) -> str:
        """The device a result was measured on, for its provenance (``cpu:<model>``, ``cuda:<model>``)."""
        return host_device()

    def claim_devices(self, environ: MutableMapping[str, str], ids: Sequence[str] = ()) -> dict[str, str]:
        """In a worker that Ray gave this target's devices (``ids``, Ray's ids of them): put them
        into the env vars the target's runtime reads, and return those variables: where the
        worker's trials run (for each result), and what each trial it starts must see."""
        return {}

    def held_alone(self, placement: Mapping[str, str]) -> bool:
        """Whether a trial placed as ``placement`` had its devices to itself: only then is its
        running out of device memory the configuration's own, and not a neighbour's (trials that
        share a GPU, or ran with no placement)."""
        return self.visible_devices is not None and bool(placement.get(self.visible_devices))

    def check_processes(self, nproc: int, devices_per_process: int) -> None:
        """Reject a trial of ``nproc`` processes holding ``devices_per_process`` devices each that
        this target's runtime cannot run, before anything starts."""

    def rank_envs(self, environ: Mapping[str, str], nproc: int, port: int,
                  master_addr: str | None = None) -> list[dict[str, str]]:
        """The env vars each local rank of a trial of ``nproc`` processes gets on top of ``environ``
        (the trial's, holding the devices the worker claimed), one dict per rank; ``port`` is free
        for a rendezvous of the target's own runtime, on this host, or, for a trial that spans
        several nodes, on node 0 at ``master_addr``. Ranks share the host's CPUs by default."""
        return [{} for _ in range(nproc)]

    def availability_note(self) -> str | None:
        """What a study should say when this target runs without its device or compiler."""
        return None

    def failed_compile(self, plan: TrialPlan, cache_root: Path) -> str | None:
        """Why ``plan`` need not be compiled again: the compile cache under ``cache_root`` holds a
        failed compile of exactly its flags (the reason, naming the entry); else ``None``."""
        return None

    def retry_failed_compile(self, plan: TrialPlan) -> None:
        """Make ``plan`` compile again what its compile cache remembers as failed (``--retry-failed``)."""

    def cache_sections(self, root: Path) -> dict[str, dict[str, Any]]:
        """Figures of this target's compiled artifacts under the cache ``root``, by section."""
        return {}

    def cache_units(self, root: Path) -> list[CacheUnit]:
        """The pieces of this target's compiled artifacts that can be removed on their own; never
        one that a running compile holds."""
        return []

    def compile_cache_persists(self) -> bool:
        """Whether a later process on this machine loads this target's compiled graphs from its
        cache instead of compiling them again."""
        return False

    def require(self) -> None:
        """Raise :class:`~autotune.errors.MissingPackageError` when a package the trials need is absent.

        The Neuron target runs without torch-neuronx on purpose (its contract tests, and compiling
        on a CPU host); a target whose trials cannot run at all without a package says so here,
        before a study starts.
        """

    def versions(self) -> dict[str, str]:
        """Versions of the packages and compilers that decide this target's results."""
        return {}


def common_knobs(params: Mapping[str, Any]) -> RuntimeKnobs:
    """The knobs every target shares: the data loader's batch size and workers."""
    return RuntimeKnobs(batch_size=params.get("batch_size"), num_workers=params.get("num_workers"))


def package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def directory_usage(path: Path) -> tuple[int, int]:
    """Files and bytes under ``path`` (0, 0 where it does not exist)."""
    files = size = 0
    if path.is_dir():
        for p in path.rglob("*"):
            if p.is_file():
                files += 1
                size += p.stat().st_size
    return files, size


def file_units(directories: list[Path]) -> list[CacheUnit]:
    """Each file under ``directories`` as a unit of its own (caches of many small independent files)."""
    units: list[CacheUnit] = []
    for d in directories:
        if d.is_dir():
            for p in d.rglob("*"):
                if p.is_file():
                    st = p.stat()
                    units.append((st.st_mtime, st.st_size, p))
    return units
