"""A throw-away PostgreSQL server in a temporary folder, for the tests and the fault benchmark.

Started with ``initdb``/``pg_ctl`` directly: pytest-postgresql runs them as the current user, and
``initdb`` refuses root, which CI is; as root they run as the ``postgres`` system user. The server
can be stopped and started again on the same data, as an upgrade or a fail-over restarts a
fleet's database.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

#: Where Debian's ``postgresql`` package puts the server's programs (.ci/run installs it), the
#: newest version found; else wherever ``initdb`` is on the PATH.
POSTGRES_BIN = next((p.parent for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                                              key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
                                              reverse=True)),
                    Path(shutil.which("initdb") or "/usr/lib/postgresql/15/bin/initdb").parent)
#: The server's password has the characters that a hand-parsed URL gets wrong: every study on it
#: checks that the URL is read as SQLAlchemy reads it (in the URL: percent-encoded).
POSTGRES_PASSWORD = "p@ss:w/rd{1}%?#"


def postgres_missing() -> str | None:
    """Why no server can be started here, or ``None``."""
    if not (POSTGRES_BIN / "initdb").exists():
        return (f"no PostgreSQL server programs (initdb) in {POSTGRES_BIN} or on the PATH "
                "(Debian: apt-get install postgresql)")
    return None


class ThrowawayPostgres:
    """One server on a free loopback port; :meth:`stop` and :meth:`start` again keep its data,
    :meth:`remove` stops it and deletes everything."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self._as_owner: list[str] = []
        if os.geteuid() == 0:
            self._as_owner = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.folder, "postgres")
        password = self.folder / "password"
        password.write_text(POSTGRES_PASSWORD)
        if self._as_owner:
            shutil.chown(password, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-E", "UTF8", "--no-sync", "--auth-local=trust",
                  "--auth-host=scram-sha-256", f"--pwfile={password}")
        self.start()

    @property
    def url(self) -> str:
        """``postgresql://postgres:PASSWORD@127.0.0.1:PORT``, without a database name."""
        return f"postgresql://postgres:{urllib.parse.quote(POSTGRES_PASSWORD, safe='')}@127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        # fsync off: a test server that loses its data in a power cut loses nothing of value.
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: every session is ended, as an administrator's restart does)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A new, empty database ``name``; its URL."""
        self.execute(f"CREATE DATABASE {name}")
        return f"{self.url}/{name}"

    def execute(self, sql: str) -> None:
        """One statement as the server's superuser, outside a transaction."""
        import sqlalchemy as sa

        engine = sa.create_engine(f"{self.url.replace('postgresql://', 'postgresql+psycopg://')}/postgres",
                                  isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(sa.text(sql))
        finally:
            engine.dispose()

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        subprocess.run([*self._as_owner, str(POSTGRES_BIN / program), *args], check=check, capture_output=True,
                       text=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
