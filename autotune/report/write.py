"""Writing a study's report: ``report.html``, and the figures as images on request.

plotly (and kaleido for images) come with the ``report`` extra; without them the commands say
which install command brings them instead of failing on an import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.atomic_file import write_atomic
from autotune import errors
from autotune.errors import AutotuneError
from autotune.report.data import study_report

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go

IMAGE_FORMATS = ("png", "svg")


def require(package: str, needed_for: str) -> None:
    """A :class:`~autotune.errors.MissingPackageError` naming the report extra when ``package`` cannot be imported."""
    errors.require(package, needed_for, "report")


def report_html(study: optuna.Study, name: str) -> tuple[str, dict[str, go.Figure]]:
    """The report page of a stored study, and its figures by name."""
    from autotune.report.figures import figures
    from autotune.report.page import render_page

    require("plotly", "autotune report")
    report = study_report(study, name)
    figs = figures(report, study)
    return render_page(report, figs), figs


def write_report(study: optuna.Study, name: str, out: Path, formats: tuple[str, ...] = ()) -> list[Path]:
    """``out/report.html``, and ``out/figures/<name>.<format>`` for each image format asked; the
    paths written, the page first."""
    unknown = sorted(set(formats) - set(IMAGE_FORMATS))
    if unknown:
        raise AutotuneError(f"--format {', '.join(unknown)}: choose {' or '.join(IMAGE_FORMATS)}")
    if formats:
        require("kaleido", "autotune report --format " + "/".join(formats))
    page, figs = report_html(study, name)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    write_atomic(path, page)
    return [path, *write_images(figs, out / "figures", formats)]


def write_images(figs: dict[str, go.Figure], directory: Path, formats: tuple[str, ...]) -> list[Path]:
    """Each figure as an image through kaleido, which renders in a Chrome or Chromium it finds on
    this machine (``BROWSER_PATH`` names one); without one it cannot, and says so."""
    if not formats:
        return []
    import plotly.io as pio

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{stem}.{fmt}" for fmt in formats for stem in figs]
    try:
        pio.write_images([figs[p.stem] for p in paths], [str(p) for p in paths], width=1100, height=600)
    except Exception as exc:  # kaleido raises its own types, and choreographer's, when no browser starts
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise AutotuneError(f"cannot write images: kaleido needs Chrome or Chromium ({first}); install one "
                            "(apt-get install chromium) or set BROWSER_PATH to it") from None
    return paths
