"""What a compile target must do.

A target turns a canonical configuration into a :class:`TrialPlan`: the env vars and compiler flags
that the trial process starts with, and the runtime knobs that the harness applies inside it.
Everything that knows a flag's spelling lives in the target's own module.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Mapping

from autotune.records import RuntimeKnobs, TrialPlan
from autotune.space import SearchSpace, builtin_space


class Target(abc.ABC):
    #: The name users pass to ``--target``.
    name: ClassVar[str]
    #: Built-in search spaces of this target, first one the default.
    spaces: ClassVar[tuple[str, ...]]

    def default_space(self, platform: str | None = None) -> SearchSpace:
        """The built-in space for ``platform`` (or the target's default one)."""
        return builtin_space(self.space_name(platform))

    def space_name(self, platform: str | None = None) -> str:
        return self.spaces[0]

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

    def available(self) -> bool:
        """Whether this target can run trials on this machine."""
        return True

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
