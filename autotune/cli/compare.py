"""``autotune compare``: the best configuration of several studies side by side, with what a
million samples cost on each one's instance type (the seeds' price-performance table)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from autotune.cli.app import app
from autotune.errors import InvalidConfigError


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def compare(
    studies: list[str] = typer.Argument(..., help="Studies to compare: a name in --storage, or STORAGE_URL#NAME "
                                                  "for a study in another storage. The first is the reference "
                                                  "of the ratios."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL of the studies given by name "
                                                     "(default: sqlite under .autotune/)."),
    prices: Optional[Path] = typer.Option(None, help="YAML or JSON file of 'instance_type: US dollars per hour' "
                                                     "that overrides the price each study ran with and the "
                                                     "catalogue's."),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    csv_out: bool = typer.Option(False, "--csv", help="Print the rows as CSV."),
) -> None:
    """Compare the best configuration of studies measured on different instance types: throughput of
    the whole instance (samples/s), latency (ms), the price of an hour and where it came from, US
    dollars per 1M samples, and each row's ratios to the first row."""
    from autotune.results.comparison import compare as compare_studies, comparison_csv

    if json_out and csv_out:
        raise InvalidConfigError("--json and --csv: choose one")
    rows = compare_studies(studies, storage=storage, prices=prices)
    if json_out:
        typer.echo("[" + ", ".join(row.model_dump_json() for row in rows) + "]")
    elif csv_out:
        typer.echo(comparison_csv(rows), nl=False)
    else:
        from autotune.rendering import render_comparison

        render_comparison(rows, Console())
