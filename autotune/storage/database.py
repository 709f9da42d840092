"""What a storage URL means: parsed by SQLAlchemy, never by hand.

A storage URL is whatever SQLAlchemy accepts (``sqlite:///path``, ``postgresql://user:pa%40ss@host/db
?sslmode=require``, ...), so it is read with :func:`sqlalchemy.engine.make_url`: a password with
special characters, a query string or braces in a path then mean what SQLAlchemy says they mean.
Two choices are autotune's own:

- ``postgresql://`` names SQLAlchemy's default driver, psycopg2. The ``fleet`` extra brings
  psycopg 3 instead; when psycopg2 is not installed and psycopg is, the URL uses it.
- A server that does not answer must be an error within seconds, not a driver waiting for minutes:
  PostgreSQL and MySQL connections get a connect timeout unless the URL sets one.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator

from autotune.errors import InvalidConfigError

#: Seconds a connection to a database server may take before the storage is reported unreachable.
#: Where a study keeps its database and its files, under the current folder, unless told otherwise.
DEFAULT_DIR = Path(".autotune")


def default_storage(cwd: Path | None = None) -> str:
    """The study database of a run in ``cwd`` that names none: SQLite under :data:`DEFAULT_DIR`."""
    return f"sqlite:///{(cwd or Path.cwd()) / DEFAULT_DIR / 'autotune.db'}"


CONNECT_TIMEOUT_S = 5
#: Where a command finds its storage URL when it is not given: a URL may hold a password, and a
#: variable keeps it off the command line (and out of ``ps``).
STORAGE_ENV = "AUTOTUNE_STORAGE"

_EXAMPLE = "e.g. sqlite:///autotune.db or postgresql://user:password@host:5432/db"


def parse_url(url: str) -> Any:
    """``url`` as a :class:`sqlalchemy.engine.URL`, with the PostgreSQL driver that is installed."""
    import sqlalchemy as sa
    from sqlalchemy.exc import ArgumentError

    if "://" not in url:
        raise InvalidConfigError(f"storage {_hide_password(url)!r} is not a database URL; {_EXAMPLE}")
    try:
        parsed = sa.engine.make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise InvalidConfigError(f"storage {_hide_password(url)!r} is not a database URL ({exc}); {_EXAMPLE}") \
            from None
    if parsed.drivername == "postgresql" and importlib.util.find_spec("psycopg2") is None \
            and importlib.util.find_spec("psycopg") is not None:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def redacted(url: str) -> str:
    """``url`` with its password hidden: every message, output and file that shows a storage URL
    shows this. Where SQLAlchemy cannot read the URL it is hidden by pattern, since a malformed
    URL (a port that is no number) still holds the password."""
    try:
        parsed = parse_url(url)
    except InvalidConfigError:
        return _hide_password(url)
    # Rendered only when there is a password to hide: rendering quotes a path's braces and the like.
    return _hide_password(url if parsed.password is None else parsed.render_as_string(hide_password=True))


#: A storage URL in a record that is printed or written (``run --json``, ``compare``): hidden.
ShownURL = Annotated[str, AfterValidator(redacted)]

#: ``scheme://user:PASSWORD@``, up to the last ``@`` (a password may hold an unencoded ``@``).
_USERINFO = re.compile(r"(://[^:/@]*:).*@")
#: ``?password=...`` (psycopg and most drivers take the password in the query as well).
_QUERY_PASSWORD = re.compile(r"([?&](?:password|passwd|sslpassword)=)[^&#]*", re.IGNORECASE)


def _hide_password(url: str) -> str:
    """``url`` with the password of its user part and its query replaced by ``***``, by pattern."""
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO.sub(r"\1***@", url, count=1))


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for another backend or an in-memory database."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def engine_url(url: str) -> str:
    """``url`` as the string to give ``create_engine`` (the driver chosen, the password kept)."""
    return parse_url(url).render_as_string(hide_password=False)


def connect_args(url: str) -> dict[str, Any]:
    """The driver's connection arguments: a wait for a busy SQLite file, a connect timeout for a
    server (unless the URL's query sets one)."""
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        # Two drivers on one SQLite file wait for each other's writes rather than fail at once.
        return {"timeout": 60}
    if backend in ("postgresql", "mysql", "mariadb") and "connect_timeout" not in parsed.query:
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    return {}
