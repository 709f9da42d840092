"""The process of one daemon job: ``autotune run``, with its exit code written to a file.

``python -m autotune.cli.job_process EXIT_FILE run SCRIPT ...``. The daemon that started the
job may be gone when it ends (a restarted daemon adopts running jobs, and cannot ``wait()`` for a
process that is not its child), so the exit code goes to ``EXIT_FILE``. A job killed by a signal
writes nothing, which is how the daemon tells "ended" from "died". Its storage URL comes through
a pipe it inherits, never on its command line. While it lives it writes a heartbeat in its row of
the job queue: a daemon on another host (which cannot see its pid) knows from it that the job is
alive, and never starts it again meanwhile.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from autotune.atomic_file import write_atomic
from autotune.daemon.job_files import STORAGE_FD_ENV, read_storage_pipe


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m autotune.cli.job_process EXIT_FILE run SCRIPT [OPTIONS]")
    exit_file = Path(sys.argv[1])
    exit_file.unlink(missing_ok=True)
    sys.argv = ["autotune", *sys.argv[2:]]
    fd = os.environ.pop(STORAGE_FD_ENV, None)
    if fd:
        storage = read_storage_pipe(int(fd))
        # In this process's argv only: /proc shows the command line it was started with.
        sys.argv.insert(2, f"--storage={storage}")
        if os.environ.get("AUTOTUNE_JOB_ID"):
            threading.Thread(target=_heartbeat, args=(os.environ["AUTOTUNE_JOB_ID"], storage),
                             name="autotune-job-heartbeat", daemon=True).start()
    code = 1
    try:
        from autotune.cli import main as cli_main

        cli_main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        write_atomic(exit_file, f"{code}\n")
    sys.exit(code)


def _heartbeat(job_id: str, storage: str) -> None:
    """Beat every ``JOB_BEAT_S`` until the process ends; a cancel that no daemon on this host
    can carry out arrives here, as the SIGINT the daemon would have sent."""
    import time

    from autotune.daemon.jobs import JOB_BEAT_S, JobStore

    store = None
    while True:
        time.sleep(JOB_BEAT_S)
        try:
            store = store or JobStore(storage)
            if store.beat(job_id):
                os.kill(os.getpid(), signal.SIGINT)
                return
        except Exception as exc:  # a database hiccup: the next beat tries again
            print(f"autotune: the job's heartbeat failed ({type(exc).__name__}: {exc}); "
                  f"trying again in {JOB_BEAT_S:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
