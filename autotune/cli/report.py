"""``autotune report`` and ``autotune dashboard``: a stored study as pictures."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from autotune.cli import options as opt
from autotune.cli.app import app, err
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    import optuna

#: Seconds between two rounds of notes while the dashboard runs: a study that is still running
#: gets notes for its new trials.
NOTES_EVERY_S = 15.0


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def report(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = opt.STORAGE,
    out: Optional[Path] = typer.Option(None, help="Folder of the report (default: .autotune/STUDY/)."),
    formats: Optional[list[str]] = typer.Option(None, "--format", "-f",
                                                help="Also write each figure as an image: png or svg "
                                                     "(repeatable; needs Chrome or Chromium)."),
    json_out: bool = typer.Option(False, "--json", help="Print the files written as JSON."),
) -> None:
    """Write OUT/report.html: one self-contained HTML file (it opens offline) with the optimisation
    history against the baseline, each knob's effect and Optuna's parameter importances, compile time
    against the value, the failures by category with their log tails, the Pareto front of a study of
    several objectives, the instance and machine time, and the best configuration's best.env lines.
    """
    from autotune.report import write_report
    from autotune.storage.database import DEFAULT_DIR
    from autotune.storage.optuna_storage import load_study

    paths = write_report(load_study(study, storage), study, out or DEFAULT_DIR / study, tuple(formats or ()))
    if json_out:
        typer.echo(json.dumps({"report": str(paths[0].resolve()), "figures": [str(p.resolve()) for p in paths[1:]]}))
        return
    for p in paths:
        typer.echo(str(p))


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def dashboard(
    storage: Optional[str] = opt.STORAGE,
    host: str = typer.Option("127.0.0.1", help="Address to listen on; optuna-dashboard has no login, so "
                                               "anything but loopback lets anyone who reaches it read "
                                               "and change the studies."),
    port: int = typer.Option(8080, help="Port to listen on (0: any free one)."),
    notes: bool = typer.Option(True, "--notes/--no-notes", help="Write each trial's note (what it measured, "
                                                                 "or its failure and log tail) and the best "
                                                                 "configuration's, every 15 s."),
) -> None:
    """Serve optuna-dashboard on the studies' storage, live, until interrupted; prints its URL."""
    import optuna

    from autotune.daemon.listening import is_loopback
    from autotune.report import require
    from autotune.storage.database import redacted
    from autotune.storage.database import default_storage
    from autotune.storage.optuna_storage import open_existing_storage, stored_study

    require("optuna_dashboard", "autotune dashboard")
    url = storage or default_storage()
    opened = open_existing_storage(url)

    def names() -> list[str]:
        return [s.study_name for s in optuna.get_all_study_summaries(opened, include_best_trial=False)]

    if not is_loopback(host):
        err.print(f"warning: listening on {host}: optuna-dashboard has no login; anyone who reaches the port can "
                  "read and change these studies", highlight=False)
    server = _server(opened, host, port)
    stop = threading.Event()
    if notes:
        def annotate_all() -> None:
            from autotune.report.dashboard import annotate

            while True:
                for name in names():
                    try:
                        annotate(stored_study(opened, name), name)
                    except Exception as exc:  # a study that is not autotune's, or one being written
                        err.print(f"notes of study {name}: {exc}", highlight=False)
                if stop.wait(NOTES_EVERY_S):
                    return

        threading.Thread(target=annotate_all, name="dashboard-notes", daemon=True).start()
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"optuna-dashboard: http://{shown}:{server.server_port}/dashboard "
               f"({len(names())} studies in {redacted(url)}; Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()


def _server(storage: optuna.storages.BaseStorage, host: str, port: int) -> WSGIServer:
    """optuna-dashboard's WSGI app behind the standard library's server, one thread per request
    (the page polls while a long request, such as importances, runs)."""
    import errno
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from optuna_dashboard import wsgi

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # every poll would print a line
            pass

    try:
        return make_server(host, port, wsgi(storage), server_class=Server, handler_class=QuietHandler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AutotuneError(f"port {port} on {host} is already in use; choose another --port") from None
        raise AutotuneError(f"cannot listen on {host}:{port}: {exc.strerror}; check --host and --port") from None
