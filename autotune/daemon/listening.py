"""Where the daemon listens and who may reach it: a job runs the code it is given, so listening
beyond this machine needs a token, and the port is bound before anything else starts."""

from __future__ import annotations

import errno
import ipaddress
import socket

from autotune.errors import AutotuneError


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
                            "code here; pass --token-file FILE (or listen on 127.0.0.1)")


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
