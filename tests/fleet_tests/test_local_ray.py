"""The local Ray a study starts: only its owner can join it.

Ray 2.60 binds its GCS and raylets to every interface whatever node address it is given, so the
guard is its token: required, and in a file only its owner can read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import JOIN_AS_STRANGER

pytestmark = pytest.mark.slow

START = textwrap.dedent("""
    import os, stat, subprocess, sys
    import ray
    from autotune.execution.scheduler import connect

    assert connect(None)
    token = os.path.expanduser("~/.ray/auth_token")
    print("mode", oct(stat.S_IMODE(os.stat(token).st_mode)))
    print("auth", os.environ.get("RAY_AUTH_MODE"))
""") + JOIN_AS_STRANGER + textwrap.dedent("""
    print("stranger", "joined" if "joined" in stranger.stdout
          else "refused for its token" if "AuthenticationError" in stranger.stderr
          else "refused: " + stranger.stderr[-2000:])
    ray.shutdown()
""")


@pytest.mark.parametrize("exported", [None, "disabled"])
def test_a_local_ray_needs_its_token_and_keeps_it_private(tmp_path: Path, exported: str | None) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    # A token Ray wrote earlier with the default umask: readable by everyone.
    (home / ".ray" / "auth_token").write_text("a" * 32)
    (home / ".ray" / "auth_token").chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    if exported:
        env["RAY_AUTH_MODE"] = exported
    done = subprocess.run([sys.executable, "-c", START], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mode 0o600" in done.stdout
    assert "auth token" in done.stdout
    assert "stranger refused for its token" in done.stdout, done.stdout
