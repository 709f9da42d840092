"""The daemon's HTTP client (httpx), as ``submit``, ``status``, ``ensure`` ... use it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from autotune.daemon.listening import default_token_file, is_loopback, read_token_file
from autotune.daemon.messages import DaemonHealth, EnsureReply, JobInfo, JobSpec, UploadInfo
from autotune.errors import AutotuneError
from autotune.results.outputs import BestConfig


class DaemonError(AutotuneError):
    """The daemon cannot be reached, or refused a request."""


class NoResultYet(DaemonError):
    """The job has no successful trial (yet): exit code 3, as for a stored study."""

    exit_code = 3


def read_token(token_file: Path | None, server: str | None = None) -> str | None:
    """The token from ``--token-file``, else from ``AUTOTUNE_TOKEN``, else, for a daemon on this
    machine (``server`` on loopback), from the file where ``autotune serve`` made it. A daemon
    elsewhere is never sent this machine's token unasked."""
    if token_file is not None:
        return read_token_file(token_file)
    if os.environ.get("AUTOTUNE_TOKEN"):
        return os.environ["AUTOTUNE_TOKEN"]
    local = default_token_file()
    if server is not None and is_loopback(urlsplit(server).hostname or "") and local.exists():
        return read_token_file(local)
    return None


class DaemonClient:
    def __init__(self, server: str, token: str | None = None, timeout: float = 60.0) -> None:
        self.server = server.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise DaemonError(f"cannot reach the autotune daemon at {self.server} ({type(exc).__name__}: "
                              f"{str(exc)[:200] or 'no answer'}); start it with autotune serve, or pass --server") from None
        if response.status_code == 401:
            raise DaemonError(f"the daemon at {self.server} refused the request: missing or wrong token; pass "
                              "--token-file FILE or AUTOTUNE_TOKEN (autotune serve keeps it in "
                              f"{_home_relative(default_token_file())} on its machine)")
        if response.status_code == 409:
            raise NoResultYet(_detail(response))
        if response.status_code >= 400:
            raise DaemonError(_detail(response))
        return response

    # -- the API ------------------------------------------------------------------------------
    def health(self) -> DaemonHealth:
        return DaemonHealth.model_validate(self._request("GET", "/health").json())

    def upload(self, archive: bytes) -> UploadInfo:
        r = self._request("POST", "/uploads", content=archive, headers={"Content-Type": "application/gzip"})
        return UploadInfo.model_validate(r.json())

    def submit(self, spec: JobSpec) -> JobInfo:
        return JobInfo.model_validate(self._request("POST", "/jobs", json=spec.model_dump(mode="json")).json())

    def ensure(self, spec: JobSpec) -> EnsureReply:
        r = self._request("POST", "/ensure", json=spec.model_dump(mode="json"), timeout=300.0)
        return EnsureReply.model_validate(r.json())

    def job(self, job_id: str) -> JobInfo:
        return JobInfo.model_validate(self._request("GET", f"/jobs/{job_id}").json())

    def jobs(self, limit: int = 50) -> list[JobInfo]:
        return [JobInfo.model_validate(j) for j in self._request("GET", "/jobs", params={"limit": limit}).json()]

    def cancel(self, job_id: str) -> JobInfo:
        return JobInfo.model_validate(self._request("POST", f"/jobs/{job_id}/cancel").json())

    def best(self, job_id: str) -> BestConfig:
        return BestConfig.model_validate(self._request("GET", f"/jobs/{job_id}/best").json())

    def logs(self, job_id: str, trial: int | None = None, tail: int | None = None, attempt: int | None = None) -> str:
        params = {k: v for k, v in (("trial", trial), ("tail", tail), ("attempt", attempt)) if v is not None}
        return self._request("GET", f"/jobs/{job_id}/logs", params=params).text

    def wait(self, job_id: str, on_update: Callable[[JobInfo], None] | None = None,
             poll_s: float = 1.0) -> JobInfo:
        """Poll until the job ends; ``on_update`` sees every state that differs from the last."""
        last = None
        while True:
            info = self.job(job_id)
            seen = (info.state, info.done, info.running, info.failed, info.best_value, info.attempts)
            if on_update is not None and seen != last:
                on_update(info)
            last = seen
            if info.state.final:
                return info
            time.sleep(poll_s)


def _home_relative(path: Path) -> str:
    try:
        return "~/" + path.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(path)


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text[:300]
    if isinstance(detail, list):  # FastAPI's validation errors
        detail = "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail)
    return f"the daemon refused the request ({response.status_code}): {detail}"
