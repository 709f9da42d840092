"""A Ray cluster of two nodes on this machine for the session: ``ray start --head`` and ``ray start
--address``, each declaring its resources as a fleet's nodes would (NeuronCores, and its instance
type as a custom resource).

Both nodes run this test's Python: Ray starts its workers with the interpreter of ``ray start``, and a
driver must match the cluster's Python and Ray. Each node runs with ``--block`` in a process group
of its own and is stopped by signalling that group (``ray stop`` would stop every Ray on the
machine). ``--temp-dir`` keeps the cluster's address file out of ``/tmp/ray``, where a plain
``ray.init()`` elsewhere on the machine would find it and join this cluster; each node has its own,
as two machines would (sharing one, a node unpacking a Ray job's working directory replaces the
one the job's driver runs in). The head runs Ray's dashboard, which takes Ray jobs. Token authentication
is off (``RAY_AUTH_MODE=disabled``) for the nodes and the drivers alike: Ray turns it on for
``ray start`` only where a token file happens to exist.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# tryfirst: pytest-xdist reads the group in its own hook, which otherwise runs first where this
# folder is named on the command line (its conftest is then loaded before xdist's worker).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One process runs every fleet test when the suite runs in several (pytest-xdist): the
    cluster's two nodes are started once, not once in each process."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("fleet"))


#: Python lines for a driver's script that has started a local Ray: a stranger (another user, a
#: wrong token) tries to join it; ``stranger`` is its completed process, whose stdout says
#: ``joined`` where it got in. Two tries, not Ray's 20 one second apart: a wrong token is refused
#: at the first, and the refusal must name the token (an unreachable or slow GCS would be refused
#: too, for nothing).
JOIN_AS_STRANGER = """
address = ray.get_runtime_context().gcs_address
stranger = subprocess.run(
    [sys.executable, "-c", f"import ray; ray.init(address={address!r}); print('joined')"],
    env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token", "HOME": "/nonexistent",
         "RAY_NUM_REDIS_GET_RETRIES": "2"},
    capture_output=True, text=True, timeout=120)
"""


#: What each node declares: its NeuronCores and its instance type (a custom resource); the second
#: also a compile worker's place (``--compile-ahead``).
HEAD = {"neuron_cores": 2, "trn1.2xlarge": 1}
SECOND = {"neuron_cores": 4, "trn1.32xlarge": 1, "compile_slots": 1}

_STATUS = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps([{"id": n["NodeID"], "alive": n["Alive"], "resources": n["Resources"]} for n in ray.nodes()]))
"""


@dataclass
class RayFleet:
    """The session's cluster: its address, and each node's process group and declared resources."""

    address: str
    temp_dir: Path
    head: subprocess.Popen
    #: Where Ray jobs are submitted (``ray job submit --address``).
    dashboard: str
    second: subprocess.Popen | None = None

    def start_second(self) -> None:
        """Start the second node (again, after :meth:`kill_second`) and wait until it has joined."""
        if self.second is None:
            self.second = _start_node(["--address", self.address], SECOND, self.temp_dir / "second")
            self.wait(lambda nodes: len(nodes) == 2)

    def kill_second(self) -> None:
        """The second node is lost at once, as a machine that dies: SIGKILL to its process group."""
        assert self.second is not None
        _kill(self.second, signal.SIGKILL)
        self.second = None

    def nodes(self) -> list[dict]:
        """The live nodes: ``{"id": ..., "resources": {...}}`` each."""
        try:
            out = subprocess.run([sys.executable, "-c", _STATUS, self.address], capture_output=True, text=True,
                                 timeout=120)
        except subprocess.TimeoutExpired:  # a head still starting on a busy machine: none yet
            return []
        # The line the script printed, whatever Ray writes around it (a raylet's backtrace at exit, say).
        listed = [line for line in out.stdout.splitlines() if line.startswith("[")]
        return [n for n in json.loads(listed[-1]) if n["alive"]] if listed else []

    def wait(self, ready, timeout: float = 120) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.nodes()
            if ready(nodes):
                return nodes
            time.sleep(1)
        raise TimeoutError(f"the Ray cluster at {self.address} did not come up in {timeout} s")


@pytest.fixture(scope="session")
def ray_fleet() -> Iterator[RayFleet]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        # Short: Ray's sockets live under it, and a Unix socket's path has at most 107 characters.
        temp_dir = Path(tempfile.mkdtemp(prefix="atr-", dir="/tmp"))
        port, dashboard = _free_port(), _free_port()
        head = _start_node(["--head", f"--port={port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"],
                           HEAD, temp_dir / "head")
        fleet = RayFleet(f"127.0.0.1:{port}", temp_dir, head, f"http://127.0.0.1:{dashboard}")
        try:
            fleet.wait(lambda nodes: len(nodes) == 1)
            fleet.start_second()
            yield fleet
        finally:
            for node in (fleet.second, fleet.head):  # a throw-away cluster: nothing to shut down cleanly
                if node is not None:
                    _kill(node, signal.SIGKILL)
            shutil.rmtree(temp_dir, ignore_errors=True)


def _start_node(args: list[str], resources: dict[str, int], temp_dir: Path, cpus: int = 1) -> subprocess.Popen:
    """A node in its own process group; ``autotune`` on its PATH, as where it is installed."""
    temp_dir.mkdir(exist_ok=True)
    # Every port of a node's agents its own: Ray's defaults (52365 for the job agent, say) are taken
    # by any other Ray on the machine (another test process's), and the head then takes no jobs.
    ports = [f"--{name}={_free_port()}" for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                     "metrics-export-port", "runtime-env-agent-port")]
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", *args, *ports, f"--num-cpus={cpus}", "--num-gpus=0",
           f"--resources={json.dumps(resources)}", f"--temp-dir={temp_dir}", "--object-store-memory=100000000",
           "--disable-usage-stats"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with (temp_dir / f"node-{time.monotonic_ns()}.log").open("w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _kill(node: subprocess.Popen, sig: signal.Signals) -> None:
    """Signal the node's process group; what is left after 15 s (Ray's own shutdown can wait for a
    head that is gone) is killed."""
    try:
        os.killpg(node.pid, sig)
        node.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
