"""A gate that a test controls, for a script to wait at: a test acts while trials are running
(cancels a job, stops the database, fills the disk, reads a page), then lets them go.

The gate is the folder named by ``AUTOTUNE_TEST_GATE`` (no variable: no gate). A trial passes when
the folder holds ``open``, or when it takes one of the folder's ``ticket-*`` files (renamed, so
that each ticket lets exactly one trial through); until then it shows that it waits with a file
``waiting-<pid>``, renamed ``passed-<pid>`` once it goes on. Importing this module waits.
"""

import os
import time
from pathlib import Path

gate = os.environ.get("AUTOTUNE_TEST_GATE")
if gate:
    folder, me = Path(gate), os.getpid()
    waiting = folder / f"waiting-{me}"

    def passes() -> bool:
        if (folder / "open").exists():
            return True
        for ticket in sorted(folder.glob("ticket-*")):
            try:
                ticket.rename(folder / f"taken-{ticket.name}-{me}")
                return True
            except FileNotFoundError:  # another trial took it first
                continue
        return False

    while not passes():
        waiting.touch()
        time.sleep(0.05)
    if waiting.exists():
        waiting.rename(folder / f"passed-{me}")
