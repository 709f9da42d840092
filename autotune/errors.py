"""Errors a user can cause.

Each is printed by the CLI as one or two lines, without a traceback, and ends the command with
exit code 2 (bad input). The message names the fix.
"""

from __future__ import annotations

import importlib

#: The name to install autotune by (pyproject.toml's ``name``): "autotune" on PyPI is another
#: project, so every install hint spells this one.
DISTRIBUTION = "torch-autotune"


class AutotuneError(Exception):
    """Base of every error caused by the user's input or environment."""

    exit_code = 2


class InvalidConfigError(AutotuneError):
    """A configuration that must not be compiled: unknown parameter, bad value, impossible combination."""


class SpaceError(AutotuneError):
    """A malformed or contradictory search-space file."""


class ScriptError(AutotuneError):
    """The script to tune is missing, not Python, or does not parse."""


class TargetError(AutotuneError):
    """An unknown target, or one that cannot run on this machine."""


class PricingError(AutotuneError):
    """A price that cannot be used: not a positive number, or a prices file that cannot be read."""


class UnknownInstanceTypeError(PricingError):
    """An instance type that autotune's catalogue does not list, given without a price."""


class MissingPackageError(AutotuneError):
    """An optional package that this use needs is not installed; the message names the install command."""

    def __init__(self, package: str, needed_for: str, install: str) -> None:
        super().__init__(f"{needed_for} needs the package {package}, which is not installed here; "
                         f"install it with: {install}")
        self.package = package


def install_hint(extra: str) -> str:
    """The command that installs one of autotune's extras: ``pip install "torch-autotune[report]"``."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def require(package: str, needed_for: str, extra: str) -> None:
    """A :class:`MissingPackageError` naming ``extra``'s install command when ``package`` cannot be imported."""
    try:
        importlib.import_module(package)
    except ImportError:
        raise MissingPackageError(package, needed_for, install_hint(extra)) from None
