"""The process of one daemon job: ``autotune run``, with its exit code written to a file.

``python -m autotune.cli.job_process EXIT_FILE run SCRIPT ...``. The daemon that started the
job may be gone when it ends (a restarted daemon adopts running jobs, and cannot ``wait()`` for a
process that is not its child), so the exit code goes to ``EXIT_FILE``. A job killed by a signal
writes nothing, which is how the daemon tells "ended" from "died".
"""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.atomic_file import write_atomic


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m autotune.cli.job_process EXIT_FILE run SCRIPT [OPTIONS]")
    exit_file = Path(sys.argv[1])
    exit_file.unlink(missing_ok=True)
    sys.argv = ["autotune", *sys.argv[2:]]
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


if __name__ == "__main__":
    main()
