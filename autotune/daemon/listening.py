"""Where the daemon listens and who may reach it.

A job runs the code it is given, with the daemon's rights, so a request must show that it comes
from someone who may run code here:

- it carries the daemon's token (by default: made on the first start into a file that only its
  owner can read, where the clients of the same user find it), as ``Authorization: Bearer`` or,
  from a browser that signed in at ``/login``, as a cookie;
- its ``Host`` names an address the daemon listens on: a web page that points its own name at
  127.0.0.1 (DNS rebinding) is refused even where no token is asked for;
- a browser's ``Origin`` is the daemon's own, and a body has the type the clients send
  (``application/json``, a snapshot's ``application/gzip``), never one that a cross-site form or
  a ``no-cors`` fetch can post without the browser asking first.

Listening beyond loopback needs a token; ``--no-token`` turns it off on loopback only. The port is
bound before anything else starts.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

if TYPE_CHECKING:
    from fastapi.datastructures import Headers
from urllib.parse import parse_qs, urlsplit

from autotune.errors import AutotuneError

#: The cookie a browser gets at ``/login``: a digest of the token, never the token itself.
SESSION_COOKIE = "autotune_session"
#: The largest JSON body a request may carry (a job's spec, with its search space's text).
MAX_JSON_BYTES = 4 * 1024 ** 2
#: What a POST's body must be, by path; every other POST takes JSON, or no body at all.
BODY_TYPES = {"/uploads": "application/gzip", "/login": "application/x-www-form-urlencoded"}
#: Reached without a token: the sign-in page itself.
OPEN_PATHS = frozenset({"/login"})
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token: a job runs the code it is given."""
    if not is_loopback(host) and not token:
        raise AutotuneError(f"refusing to listen on {host} without a token: anyone who reaches the port could run "
                            "code here; drop --no-token (--no-token is for 127.0.0.1 only)")


# -- the token ----------------------------------------------------------------------------------

def default_token_file() -> Path:
    """``$XDG_CONFIG_HOME/autotune/token`` (``~/.config/autotune/token``): one per user, so that
    the clients of the user who runs the daemon find it without being told."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "autotune" / "token"


def read_token_file(path: Path) -> str:
    """The token in ``path``; refused when other users may read the file (they could run code
    as its owner) or it is empty or not text."""
    try:
        mode = path.stat().st_mode
        raw = path.read_bytes()
    except OSError as exc:
        raise AutotuneError(f"cannot read the token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AutotuneError(f"the token file {path} can be read by other users (mode {stat.S_IMODE(mode):04o}); "
                            f"chmod 600 {path}")
    try:
        token = raw.decode().strip()
    except UnicodeDecodeError:
        raise AutotuneError(f"the token file {path} is not text (not UTF-8); write the token alone in it") from None
    if not token:
        raise AutotuneError(f"the token file {path} is empty")
    return token


def ensure_token_file(path: Path) -> str:
    """The token in ``path``, made there on the first start: 32 random bytes, in a file created
    with mode 0600 (never readable by others, not even for an instant) in a folder of mode 0700."""
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another daemon made it meanwhile
            return read_token_file(path)
        except OSError as exc:
            raise AutotuneError(f"cannot write the token file {path}: {exc.strerror}; "
                                "pass --token-file FILE") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
    return read_token_file(path)


def session_value(token: str) -> str:
    """The browser's cookie: it proves the token was given, and does not reveal it."""
    return hmac.new(token.encode(), b"autotune browser session", hashlib.sha256).hexdigest()


# -- the listening socket -----------------------------------------------------------------------

def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts, so that a taken port is a clear
    error and not a traceback from inside uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AutotuneError(f"port {port} on {host} is already in use (another autotune serve?); "
                                "choose another --port") from None
        raise AutotuneError(f"cannot listen on {host}:{port}: {exc.strerror}; check --host and --port") from None
    return sock


def host_names(host: str, extra: list[str] | tuple[str, ...] = ()) -> frozenset[str]:
    """The names a request's ``Host`` may give for a daemon listening on ``host``: the loopback
    names on loopback; on all interfaces, this machine's names and addresses too; and the names
    of ``--allow-host`` (a DNS alias, a load balancer)."""
    names = {host.strip("[]").lower(), *(n.lower() for n in extra)}
    if is_loopback(host) or host in _WILDCARDS:
        names.update(_LOOPBACK_NAMES)
    if not is_loopback(host):
        import psutil

        names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
        if host in _WILDCARDS:
            names.update(a.address.split("%")[0].lower() for addrs in psutil.net_if_addrs().values()
                         for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))
    names.discard("")
    return frozenset(names)


def _name_and_port(authority: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit("//" + authority)
        return (parts.hostname or "", parts.port or 80)
    except ValueError:  # a port that is not a number
        return None


# -- every request ------------------------------------------------------------------------------

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestGuard:
    """The checks above, before a request reaches the app (an ASGI middleware, so that a refused
    body is never read): Host, Origin, token, a body's type and size."""

    def __init__(self, app: App, *, token: str | None, names: frozenset[str], port: int) -> None:
        self.app = app
        self.token = token
        self.names = names
        self.port = port
        self.session = session_value(token) if token else None

    def ours(self, authority: str) -> bool:
        found = _name_and_port(authority)
        return found is not None and found[0] in self.names and found[1] == self.port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from fastapi.datastructures import Headers
        from fastapi.responses import JSONResponse, RedirectResponse

        headers = Headers(scope=scope)
        refusal = self.refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        if status == 401 and scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
            response: Any = RedirectResponse("/login", status_code=303)  # a browser signs in first
        else:
            response = JSONResponse({"detail": detail}, status_code=status,
                                    headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)
        await response(scope, receive, send)

    def refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        """(status, why) of a request that must not reach the app, or None."""
        host = headers.get("host", "")
        if not self.ours(host):
            return 421, (f"the Host {host!r} is not an address this daemon listens on (a web page's own name "
                         f"pointed at it?); use http://127.0.0.1:{self.port}, or start it with --allow-host NAME")
        origin = headers.get("origin")
        if origin is not None and not (origin.startswith("http://") and self.ours(origin[len("http://"):])):
            return 403, f"refused a cross-site request from {origin}: only the daemon's own pages may send one"
        path, method = scope["path"], scope["method"]
        if self.token is not None and path not in OPEN_PATHS and not self.authorized(headers):
            return 401, "missing or wrong token"
        if method in ("GET", "HEAD", "OPTIONS"):
            return None
        return self.body_refusal(path, headers)

    def authorized(self, headers: Headers) -> bool:
        assert self.token is not None and self.session is not None
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return True
        cookie = _cookie(headers.get("cookie", ""), SESSION_COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.session.encode())

    @staticmethod
    def body_refusal(path: str, headers: Headers) -> tuple[int, str] | None:
        length = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked and (length is None or length == "0"):
            return None  # no body: nothing to check (a cancel)
        wanted = BODY_TYPES.get(path, "application/json")
        given = headers.get("content-type", "").split(";")[0].strip().lower()
        if given != wanted:
            return 415, f"{path} takes {wanted}, not {given or 'a body without a type'}"
        if path == "/uploads":
            return None  # streamed to disk and bounded by --max-upload as it comes
        if chunked or length is None or not length.isdigit():
            return 411, f"{path}: give the body's Content-Length"
        if int(length) > MAX_JSON_BYTES:
            return 413, (f"{path}: a body of {int(length) / 1024 ** 2:.1f} MiB is over the daemon's limit of "
                         f"{MAX_JSON_BYTES / 1024 ** 2:g} MiB")
        return None


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def form_field(body: bytes, name: str) -> str:
    """One field of a form posted as ``application/x-www-form-urlencoded``."""
    try:
        values = parse_qs(body.decode(errors="replace"), max_num_fields=8).get(name)
    except ValueError:  # more fields than a sign-in form has
        return ""
    return values[0] if values else ""
