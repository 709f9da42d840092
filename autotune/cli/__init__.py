"""The ``autotune`` command line.

:mod:`.app` holds the Typer app; each module beside it registers a group of commands on it:
:mod:`.commands` (trial, run, best, show), :mod:`.apply` (exec, verify), :mod:`.minimize`, :mod:`.compare`, :mod:`.cache`, :mod:`.landscape`,
:mod:`.report` (report, dashboard) and :mod:`.daemon` (serve, submit, status, cancel, logs, ensure,
and ``best --server``). This is the top layer: it may import every other part of autotune, and
nothing imports it.
"""

from __future__ import annotations

import os
import sys

from rich.markup import escape

from autotune.cli import apply, cache, commands, compare, daemon, landscape, minimize, report  # noqa: F401  (each registers its commands)
from autotune.cli.app import app, err
from autotune.errors import AutotuneError
from autotune.records import APPLY_ENV


def main() -> None:
    # A shell that sourced best.env names a configuration for production runs: autotune's own work
    # (its studies, Ray workers, trials) applies none.
    os.environ.pop(APPLY_ENV, None)
    try:
        app()
    except AutotuneError as exc:
        # escape: a message may hold brackets (an extra, ``.[cpu]``) that are not markup
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


__all__ = ["app", "main"]
