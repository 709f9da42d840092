"""``autotune cache stats|prune|clear``: the cache root of compiled artifacts and results."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from autotune.cli.app import app
from autotune.errors import InvalidConfigError

cache_app = typer.Typer(help="Inspect and manage the cache of compiled artifacts and results.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("stats")
def cache_stats_cmd(
    cache: Optional[Path] = typer.Option(None, help="Cache root (default: ~/.cache/autotune)."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Entries by target, compile-cache hits and misses, sizes; done/failed/locked Neuron entries."""
    from autotune.cache import cache_stats, open_cache
    from autotune.rendering import fmt_bytes

    stats = cache_stats(open_cache(cache))
    if json_out:
        typer.echo(json.dumps(stats.to_json()))
        return
    out = Console()
    out.print(f"[bold]cache[/bold] {stats.root}")
    for name, figures in stats.sections.items():
        parts = [f"{k}={fmt_bytes(v) if k == 'bytes' else v}" for k, v in figures.items()]
        out.print(f"  {name:22s} " + ", ".join(parts))


@cache_app.command("prune")
def cache_prune_cmd(
    cache: Optional[Path] = typer.Option(None, help="Cache root (default: ~/.cache/autotune)."),
    max_size: Optional[str] = typer.Option(None, help="Remove the oldest entries until under this size, e.g. 20GiB."),
    older_than: Optional[str] = typer.Option(None, help="Remove entries older than this, e.g. 30d or 12h."),
) -> None:
    """Remove old entries; entries locked by a running compile are kept."""
    from autotune.cache import open_cache, parse_age, prune
    from autotune.rendering import fmt_bytes
    from autotune.units import parse_size

    if max_size is None and older_than is None:
        raise InvalidConfigError("give --max-size, --older-than or both")
    removed, freed = prune(open_cache(cache), max_size=parse_size(max_size) if max_size else None,
                           older_than=parse_age(older_than) if older_than else None)
    typer.echo(f"removed {removed} entries, freed {fmt_bytes(freed)}")


@cache_app.command("clear")
def cache_clear_cmd(
    cache: Optional[Path] = typer.Option(None, help="Cache root (default: ~/.cache/autotune)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Remove every compiled artifact and remembered result under the cache root (autotune's own
    folders there, nothing else)."""
    from autotune.cache import clear, open_cache, own_sections
    from autotune.rendering import fmt_bytes

    root = open_cache(cache)
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidConfigError("autotune cache clear removes the compiled artifacts and results in the cache; "
                                     "pass --yes")
        names = ", ".join(p.name for p in own_sections(root))
        typer.confirm(f"remove {names} under {root.path}?", abort=True)
    typer.echo(f"cleared {root.path}, freed {fmt_bytes(clear(root))}")

