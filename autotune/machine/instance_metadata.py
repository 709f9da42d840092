"""The EC2 instance metadata service: which instance type this machine is.

Costs and the comparison of instance types need the instance type of every result, and on EC2 the
metadata service is the authority. It speaks IMDSv2 (the only version an instance may be limited
to): ``PUT /latest/api/token`` with a TTL header returns a session token, which a
``GET /latest/meta-data/instance-type`` must carry. Off EC2 the address does not answer, so the whole
exchange is capped at :data:`TIMEOUT_S` and its answer kept for the process: asking costs nothing
worth noticing there. Written with the standard library's ``urllib`` (with no proxy, which would
otherwise receive a link-local request) rather than an AWS SDK, which would be a large dependency
for two requests.

``AUTOTUNE_IMDS_ENDPOINT`` points it at another address (as the AWS SDKs'
``AWS_EC2_METADATA_SERVICE_ENDPOINT`` does); ``AWS_EC2_METADATA_DISABLED=true`` turns it off.
"""

from __future__ import annotations

import functools
import http.client
import os
import re
import time
import urllib.request

ENDPOINT_ENV = "AUTOTUNE_IMDS_ENDPOINT"
DEFAULT_ENDPOINT = "http://169.254.169.254"
DISABLED_ENV = "AWS_EC2_METADATA_DISABLED"
#: Seconds for the token and the answer together.
TIMEOUT_S = 0.3
TOKEN_PATH = "/latest/api/token"
INSTANCE_TYPE_PATH = "/latest/meta-data/instance-type"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
#: ``trn1.32xlarge``, ``u-6tb1.metal``: anything else (a proxy's or a portal's page) is no answer.
_INSTANCE_TYPE = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+$")


def imds_instance_type(timeout_s: float = TIMEOUT_S) -> str | None:
    """This EC2 instance's type from the metadata service, or ``None`` off EC2 (or when it is
    disabled, or does not answer within ``timeout_s``). Asked once per process and endpoint."""
    if os.environ.get(DISABLED_ENV, "").strip().lower() == "true":
        return None
    return _ask(os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT, timeout_s)


@functools.lru_cache(maxsize=None)
def _ask(endpoint: str, timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    base = endpoint.rstrip("/")
    try:
        token = _request(opener, urllib.request.Request(
            base + TOKEN_PATH, method="PUT", headers={TOKEN_TTL_HEADER: "60"}), deadline)
        answer = _request(opener, urllib.request.Request(
            base + INSTANCE_TYPE_PATH, headers={TOKEN_HEADER: token}), deadline)
    except (OSError, ValueError, http.client.HTTPException):
        # URLError and timeouts are OSErrors; a garbled answer a ValueError; a reply that is not HTTP
        # (a status line of another protocol, a body cut short) an HTTPException.
        return None
    return answer if is_instance_type(answer) else None


def is_instance_type(name: str) -> bool:
    """Whether ``name`` is written as an EC2 instance type (``inf2.xlarge``): a firmware's
    placeholder such as ``To Be Filled By O.E.M.`` is not."""
    return _INSTANCE_TYPE.match(name) is not None


def _request(opener: urllib.request.OpenerDirector, request: urllib.request.Request, deadline: float) -> str:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the instance metadata service did not answer in time")
    with opener.open(request, timeout=left) as response:
        return response.read(256).decode("ascii").strip()
