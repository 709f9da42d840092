"""``autotune run`` on a terminal: a live progress bar with the trials done and asked, the best so
far, the time elapsed and an estimate of the time left, read from a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 64]}
  mode: {type: categorical, choices: [eager], default: eager}
"""

pytestmark = pytest.mark.slow


def _run_on_a_terminal(argv: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its stdout and stderr; its exit code and all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": "220", "TERM": "xterm"})
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise TimeoutError(out.decode(errors="replace")[-2000:])
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed: the process is gone
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.kill()
    return proc.wait(), out.decode(errors="replace")


def test_run_on_a_terminal_shows_a_progress_bar_with_elapsed_and_left(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    code, out = _run_on_a_terminal([sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "tiny_train.py"),
                                    "--trials", "2", "--target", "inductor", "--space", str(space), "--seed", "0",
                                    "--cache", str(tmp_path / "cache")],
                                   cwd=tmp_path)
    assert code == 0, out[-2000:]
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", f) for f in re.split(r"\r|\n", out)]
    frames = [f for f in frames if " done, " in f]
    first = [f for f in frames if "0/2 done" in f]
    after_one = [f for f in frames if "1/2 done" in f]
    assert first and "estimate after the first trial" in first[0], frames[:3]
    assert len({re.search(r"([0-9.]+) s elapsed", f).group(1) for f in first}) > 1, "the elapsed time runs on"
    assert after_one, frames
    line = after_one[-1]
    assert "━" in line, "the bar"
    assert re.search(r"best [0-9,.]+ samples/s \(1\.00x baseline\)", line), line
    assert re.search(r"[0-9.]+ s elapsed, about [0-9.]+ (s|ms) left", line), line
