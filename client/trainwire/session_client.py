"""``trainwire.init()``: connect to a coordinator, or start an embedded one."""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
import uuid

from trainwire.client import CoordinatorClient
from trainwire_core.errors import FrameworkNotInstalledError, UnavailableError

_lock = threading.Lock()
_client: CoordinatorClient | None = None
_embedded: subprocess.Popen | None = None
logger = logging.getLogger(__name__)

# An embedded coordinator that dies is started again this many times, on the same port,
# store and state, so the runs it drove carry on and watchers reconnect (as a service's
# restart policy would do).
EMBEDDED_RESTARTS = 5
# The line an embedded coordinator prints with its local Ray's address, before it listens.
RAY_LINE = "trainwire coordinator ray "


# This program's embedded coordinator: its runs end with this program, and it does not take
# over runs another program's embedded coordinator left in the same state file.
_OWNER = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
# The embedded coordinator's local Ray, exported as RAY_ADDRESS so that this program's own
# Ray work (ray.data) joins it instead of starting a second Ray on the same cores.
_exported_ray_address = ""


def _spawn_embedded(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    global _exported_ray_address
    env = dict(os.environ, TRAINWIRE_COORDINATOR_EMBEDDED_OWNER=_OWNER)
    # A coordinator embedded in the user's own program reads the user's own files and buckets.
    env.setdefault("TRAINWIRE_COORDINATOR_ALLOWED_PATH_PREFIXES", '["file:///", "s3://"]')
    if _exported_ray_address and env.get("RAY_ADDRESS") == _exported_ray_address:
        del env["RAY_ADDRESS"]  # a restarted coordinator starts its Ray anew
    # stdin is a pipe only this process holds: when it dies, however, the coordinator sees EOF and stops.
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(RAY_LINE):
            ray_address = line[len(RAY_LINE) :].strip()
            if "RAY_ADDRESS" not in os.environ or os.environ["RAY_ADDRESS"] == _exported_ray_address:
                os.environ["RAY_ADDRESS"] = _exported_ray_address = ray_address
        if "listening on" in line:
            # Keep draining stdout so the coordinator never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, line.rsplit(" ", 1)[-1].strip()
    raise UnavailableError(f"the embedded coordinator exited with code {proc.wait()} before listening")


def _supervise(proc: subprocess.Popen, cmd: list[str]) -> None:
    """Restarts the embedded coordinator when it dies, unless ``shutdown()`` stopped it."""
    global _embedded
    for _ in range(EMBEDDED_RESTARTS):
        code = proc.wait()
        with _lock:
            if _embedded is not proc:
                return  # stopped on purpose
            logger.warning("the embedded coordinator exited with code %s; starting it again", code)
            try:
                proc, _ = _spawn_embedded(cmd)
            except UnavailableError:
                logger.exception("the embedded coordinator could not be started again")
                _embedded = None
                return
            _embedded = proc


def _program_ray_address() -> str:
    """The GCS address of a Ray this program has started or joined itself ("" if none)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    return ray.get_runtime_context().gcs_address


def _start_embedded(store: str | None, state: str | None, num_cpus: int | None) -> str:
    global _embedded
    from importlib.metadata import entry_points

    from trainwire.cli import COMMANDS_GROUP

    # The coordinator distribution registers its command with the CLI; the SDK only runs it.
    if not entry_points(group=COMMANDS_GROUP, name="coordinator"):
        raise FrameworkNotInstalledError("an embedded coordinator", "trainwire-coordinator")
    cmd = [sys.executable, "-m", "trainwire.cli", "coordinator", "--exit-with-parent"]
    if store:
        cmd += ["--store", store]
    if state:
        cmd += ["--state", state]
    if num_cpus:
        cmd += ["--ray-num-cpus", str(num_cpus)]
    program_ray = _program_ray_address()
    if program_ray:
        # The program started Ray itself (ray.init() before its first fit, as Ray scripts do):
        # the coordinator joins that one instead of starting a second Ray on the same cores.
        cmd += ["--ray-address", program_ray]
    proc, address = _spawn_embedded([*cmd, "--port", "0"])
    _embedded = proc
    atexit.register(shutdown)
    # Restarts bind the same port, so clients (and their watch streams) reconnect to it.
    port = address.rsplit(":", 1)[1]
    threading.Thread(target=_supervise, args=(proc, [*cmd, "--port", port]), daemon=True).start()
    return address


def init(
    address: str | None = None,
    *,
    store: str | None = None,
    state: str | None = None,
    token: str | None = None,
    num_cpus: int | None = None,
    log_to_driver: bool | None = None,
    runtime_env: dict | None = None,
) -> CoordinatorClient:
    """Connects to a coordinator (``address`` or ``TRAINWIRE_ADDRESS``), else starts a local one.

    Args:
        address: ``host:port`` of a running coordinator.
        store: Shared store of an embedded coordinator.
        state: Metadata store of an embedded coordinator.
        token: Bearer token for a coordinator that requires one (or ``TRAINWIRE_TOKEN``).
        num_cpus: Logical CPUs of the embedded coordinator's local Ray.
        log_to_driver: Print the workers' output during ``fit()``, as ``ray.init(log_to_driver=)``
            (default: on, or ``TRAINWIRE_LOG_TO_DRIVER=0`` for off).
        runtime_env: The runtime environment of every run whose RunConfig gives none, as
            ``ray.init(runtime_env=)``.
    """
    global _client
    if log_to_driver is not None:
        settings["log_to_driver"] = log_to_driver
    if runtime_env is not None:
        from trainwire.runtime_env import check

        settings["runtime_env"] = check(runtime_env)
    with _lock:
        if _client is not None:
            return _client
        address = address or os.environ.get("TRAINWIRE_ADDRESS") or _start_embedded(store, state, num_cpus)
        _client = CoordinatorClient(address, token=token or os.environ.get("TRAINWIRE_TOKEN"))
        return _client


# What init() set for the whole program.
settings: dict = {
    "log_to_driver": os.environ.get("TRAINWIRE_LOG_TO_DRIVER", "1") not in ("0", "false"),
    "runtime_env": None,
}


def is_embedded(address: str) -> bool:
    """Whether ``address`` is the coordinator ``init()`` embedded in this program."""
    return _embedded is not None and _client is not None and _client.address == address


def get_client() -> CoordinatorClient:
    """The client ``init()`` made, initialising with the defaults if needed."""
    return _client if _client is not None else init()


def shutdown() -> None:
    """Closes the client and stops an embedded coordinator."""
    global _client, _embedded
    with _lock:
        if _client is not None:
            _client.close()
            _client = None
        if _embedded is not None:
            proc, _embedded = _embedded, None  # first, so the supervisor does not start it again
            proc.terminate()
            try:
                proc.wait(10)  # it exits within 8 s of SIGTERM
            except subprocess.TimeoutExpired:
                proc.kill()
