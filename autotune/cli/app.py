"""The ``autotune`` Typer app, its error console and what every command module shares.

Each command module (:mod:`.commands`, :mod:`.cache`, :mod:`.landscape`, :mod:`.daemon`) registers
its commands on :data:`app`; :mod:`autotune.cli` imports them all and runs the app.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import typer
from rich.console import Console

from autotune.log_tail import log_tail

if TYPE_CHECKING:
    from autotune.cache import CacheRoot
    from autotune.records import MeasurementProtocol
    from autotune.trial import PreparedTrial

app = typer.Typer(
    name="autotune",
    help="Tune compiler flags and runtime knobs of an unmodified PyTorch script "
         "(AWS Neuron, torch-xla, torch.compile).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
T = TypeVar("T")

# Exit codes: 0 success, 1 a trial failed, 2 bad input, 3 every trial of a study failed.
EXIT_TRIAL_FAILED = 1


def with_progress(label: str, work: Callable[[], T], *, log: Path | None = None, quiet: bool = False) -> T:
    """Run ``work`` in a thread while a spinner shows the elapsed time and the log's last line."""
    if quiet or not err.is_terminal:
        return work()
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(value=_call(work)), daemon=True)
    started = time.monotonic()
    thread.start()
    with err.status(label) as status:
        while thread.is_alive():
            thread.join(0.25)
            last = _last_line(log) if log else ""
            status.update(f"{label} [dim]{time.monotonic() - started:5.0f} s[/dim]  {last[:100]}")
    value = box["value"]
    if isinstance(value, _Raised):
        raise value.exc
    return value


def measuring_here(prepared: PreparedTrial, args: list[str], cache: CacheRoot,
                   protocol: MeasurementProtocol) -> tuple[MeasurementProtocol, str | None]:
    """``protocol`` as a study's runs are measured where studies of this script on this machine and
    target found the host noisy (:func:`autotune.repeats.pruning.under_noise` of the noise they kept
    in ``cache``); and a line that says so (``None`` on a quiet host)."""
    from autotune.cache import noise_key
    from autotune.measurement.noise import spread_text
    from autotune.provenance import caller_env, provenance
    from autotune.repeats.pruning import under_noise

    here = provenance(prepared.target, prepared.script, args, env=caller_env(prepared.target))
    noise = cache.get_noise(noise_key(here, prepared.target.name))
    measured = under_noise(protocol, noise)
    if measured.min_measure_seconds <= protocol.min_measure_seconds:
        return measured, None
    return (measured, f"one run of {prepared.script.name} here reads {spread_text(noise.spread or 0.0)} of the mean "
                      f"of its runs (as studies here measured): each run measures at least "
                      f"{measured.min_measure_seconds:.0f} s after warm-up")


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _call(work: Callable[[], T]) -> T | _Raised:
    try:
        return work()
    except BaseException as exc:  # re-raised on the main thread
        return _Raised(exc)


def _last_line(path: Path) -> str:
    lines = log_tail(path, max_bytes=2048).strip().splitlines()
    return lines[-1].strip() if lines else ""


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from autotune.errors import DISTRIBUTION, AutotuneError

        try:
            typer.echo(f"autotune {version(DISTRIBUTION)}")
        except PackageNotFoundError:  # imported from a folder that was never installed
            raise AutotuneError(f"autotune is not installed as {DISTRIBUTION} here: pip install -e .") from None
        raise typer.Exit()


@app.callback(context_settings={"help_option_names": ["-h", "--help"]})
def _root(
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                  help="Print the installed version and exit."),
) -> None:
    """Tune compiler flags and runtime knobs of an unmodified PyTorch script."""

