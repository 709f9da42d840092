"""Errors a user can cause.

Each is printed by the CLI as one or two lines, without a traceback, and ends the command with
exit code 2 (bad input). The message names the fix.
"""

from __future__ import annotations


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
