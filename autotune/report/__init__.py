"""Reports of a stored study: an HTML page with plots, images of its figures, and what makes the
study read well in optuna-dashboard.

:mod:`.data` reads the study once (the same trial summaries as ``autotune show --json``);
:mod:`.figures` draws them with plotly; :mod:`.page` lays them out as one self-contained HTML file;
:mod:`.write` writes the file and the images; :mod:`.dashboard` writes the notes that
optuna-dashboard shows. It reads the study's storage and may import :mod:`autotune.study` and the
parts below it; the CLI and the daemon use it.
"""

from __future__ import annotations

from autotune.report.data import StudyReport, study_report
from autotune.report.write import IMAGE_FORMATS, report_html, require, write_report

__all__ = ["IMAGE_FORMATS", "StudyReport", "report_html", "require", "study_report", "write_report"]
