"""``trainwire.init()``: connect to a coordinator, or start an embedded one.

``init`` takes every keyword ``ray.init`` takes. On the embedded default the embedded coordinator's
Ray is started with them, as ``ray.init`` starts a Ray, and this program's own Ray work (Ray Data,
tasks, actors, a later ``ray.init()``) joins that Ray with its auth token.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import subprocess
import sys
import threading
import uuid
import warnings
from typing import Any

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

# ray.init's hidden keywords in Ray 2.60 (its ``**kwargs``); any other is refused, as Ray refuses it.
RAY_HIDDEN_KEYWORDS = frozenset(
    {
        "_enable_object_reconstruction",
        "_plasma_directory",
        "object_spilling_directory",
        "_node_ip_address",
        "_driver_object_store_memory",
        "_memory",
        "_redis_username",
        "_redis_password",
        "_temp_dir",
        "_metrics_export_port",
        "_system_config",
        "_tracing_startup_hook",
        "_node_name",
        "_skip_env_hook",
        "allow_multiple",
        "storage",
    }
)
# init()'s own keywords; its other named parameters are ray.init's.
OWN_KEYWORDS = frozenset({"store", "state", "token"})
# ray.init keywords that mean something whichever coordinator init() reaches: the defaults of
# the program's runs, and the call itself.
ANY_COORDINATOR_KEYWORDS = frozenset({"address", "ignore_reinit_error", "log_to_driver", "runtime_env"})
# ray.init's addresses that name a Ray for the embedded coordinator rather than a coordinator.
RAY_ADDRESSES = ("auto", "local")

# ray.init keywords that configure this program's own driver (its Ray job), not the cluster.
DRIVER_KEYWORDS = frozenset(
    {
        "namespace",
        "job_config",
        "runtime_env",
        "log_to_driver",
        "logging_config",
        "configure_logging",
        "logging_level",
        "logging_format",
        "_driver_object_store_memory",
        "_skip_env_hook",
    }
)
# The line an embedded coordinator prints with its local Ray's address, before it listens.
RAY_LINE = "trainwire coordinator ray "

# This program's embedded coordinator: its runs end with this program, and it does not take
# over runs another program's embedded coordinator left in the same state file.
_OWNER = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
# The embedded coordinator's local Ray, exported as RAY_ADDRESS so that this program's own
# Ray work (ray.data, tasks, a later ray.init()) joins it instead of starting a second Ray on the same cores.
_exported_ray_address = ""


class UnknownKeywordError(TypeError, RuntimeError):
    """A keyword ``ray.init`` does not take: a ``TypeError``, and the ``RuntimeError`` Ray raises for it."""


def _share_ray_auth() -> None:
    """Lets this program's own Ray driver present the token the embedded Ray demands.

    The embedded Ray was started with this program's environment: without ``RAY_AUTH_MODE`` it
    uses Ray's default, token authentication, with the token in ``~/.ray/auth_token`` (or
    ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``, which the coordinator inherited from here). A
    driver that joins an address it was given enables token mode only when told to.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return  # set by the user (or by a Ray this program started), and inherited by the coordinator
    os.environ["RAY_AUTH_MODE"] = "token"
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None and not sys.modules["ray"].is_initialized():
        # Ray read its config when imported; re-read it, as ray.init does when it enables token auth.
        raylet.Config.initialize("")


def _spawn_embedded(cmd: list[str], ray_options: str) -> tuple[subprocess.Popen, str]:
    global _exported_ray_address
    from trainwire.embedded import RAY_OPTIONS_ENV

    env = dict(os.environ, TRAINWIRE_COORDINATOR_EMBEDDED_OWNER=_OWNER)
    # A coordinator embedded in the user's own program reads the user's own files and buckets.
    env.setdefault("TRAINWIRE_COORDINATOR_ALLOWED_PATH_PREFIXES", '["file:///", "s3://"]')
    if ray_options:
        env[RAY_OPTIONS_ENV] = ray_options
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
                _share_ray_auth()
        if "listening on" in line:
            # Keep draining stdout so the coordinator never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, line.rsplit(" ", 1)[-1].strip()
    raise UnavailableError(f"the embedded coordinator exited with code {proc.wait()} before listening")


def _supervise(proc: subprocess.Popen, cmd: list[str], ray_options: str) -> None:
    """Restarts the embedded coordinator when it dies, unless ``shutdown()`` stopped it."""
    global _embedded
    for _ in range(EMBEDDED_RESTARTS):
        code = proc.wait()
        with _lock:
            if _embedded is not proc:
                return  # stopped on purpose
            logger.warning("the embedded coordinator exited with code %s; starting it again", code)
            try:
                proc, _ = _spawn_embedded(cmd, ray_options)
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


def _start_embedded(store: str | None, state: str | None, ray_address: str | None, given: dict[str, Any]) -> str:
    global _embedded
    from importlib.metadata import entry_points

    from trainwire.cli import COMMANDS_GROUP
    from trainwire.embedded import encode_options

    # The coordinator distribution registers its command with the CLI; the SDK only runs it.
    if not entry_points(group=COMMANDS_GROUP, name="coordinator"):
        raise FrameworkNotInstalledError("an embedded coordinator", "trainwire-coordinator")
    cmd = [sys.executable, "-m", "trainwire.embedded", "--exit-with-parent"]
    if store:
        cmd += ["--store", store]
    if state:
        cmd += ["--state", state]
    cluster = {name: value for name, value in given.items() if name not in DRIVER_KEYWORDS}
    driver = {name: value for name, value in given.items() if name in DRIVER_KEYWORDS}
    ray_options = ""
    program_ray = _program_ray_address()
    if program_ray:
        # The program started Ray itself (ray.init() before its first fit, as Ray scripts do):
        # the coordinator joins that one instead of starting a second Ray on the same cores.
        cmd += ["--ray-address", program_ray]
        _warn_ignored(given, "this program's Ray was started before", stacklevel=3)
    elif cluster or ray_address:
        # The embedded Ray is started with them, as ray.init starts a Ray.
        ray_options = encode_options({**cluster, **({"address": ray_address} if ray_address else {})})
    proc, address = _spawn_embedded([*cmd, "--port", "0"], ray_options)
    _embedded = proc
    atexit.register(shutdown)
    # Restarts bind the same port, so clients (and their watch streams) reconnect to it.
    port = address.rsplit(":", 1)[1]
    threading.Thread(target=_supervise, args=(proc, [*cmd, "--port", port], ray_options), daemon=True).start()
    target = (
        _exported_ray_address or os.environ.get("RAY_ADDRESS") or os.environ.get("TRAINWIRE_COORDINATOR_RAY_ADDRESS")
    )
    if driver and not program_ray and target:
        import ray

        # Keywords of this program's own Ray job: its driver joins the embedded Ray now, with
        # them, as ray.init would connect it (without them it joins on first use).
        ray.init(address=target, **driver)
    return address


def _warn_ignored(given: dict[str, Any], why: str, stacklevel: int) -> None:
    """One warning naming the ``ray.init`` keywords that cannot apply (``stacklevel`` as ``warnings.warn``'s)."""
    ignored = sorted(set(given) - ANY_COORDINATOR_KEYWORDS)
    if ignored:
        warnings.warn(
            f"trainwire.init(): {why}, so these ray.init keywords do not apply: {', '.join(ignored)}",
            stacklevel=stacklevel + 1,
        )


def _given_ray_keywords(values: dict[str, Any], hidden: dict[str, Any]) -> dict[str, Any]:
    """The ``ray.init`` keywords a caller set away from their defaults (as Ray's client path judges)."""
    unknown = [name for name in hidden if name not in RAY_HIDDEN_KEYWORDS]
    if unknown:
        raise UnknownKeywordError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    given = {
        name: value
        for name, value in values.items()
        if name not in OWN_KEYWORDS and name != "address" and value is not _DEFAULTS[name] and value != _DEFAULTS[name]
    }
    return {**given, **hidden}


def init(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    resources: dict[str, float] | None = None,
    labels: dict[str, str] | None = None,
    object_store_memory: int | None = None,
    local_mode: bool = False,
    ignore_reinit_error: bool = False,
    include_dashboard: bool | None = None,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
    job_config: Any = None,
    configure_logging: bool = True,
    logging_level: int | str = "info",
    logging_format: str | None = None,
    logging_config: Any = None,
    log_to_driver: bool | None = None,
    namespace: str | None = None,
    runtime_env: dict | None = None,
    enable_resource_isolation: bool = False,
    cgroup_path: str | None = None,
    system_reserved_cpu: float | None = None,
    system_reserved_memory: int | None = None,
    proxy_server_url: str | None = None,
    store: str | None = None,
    state: str | None = None,
    token: str | None = None,
    **kwargs: Any,
) -> CoordinatorClient:
    """Connects to a coordinator (``address`` or ``TRAINWIRE_ADDRESS``), else starts a local one.

    Every keyword of ``ray.init`` is taken, with its meaning. On the embedded default (no
    coordinator address) the embedded coordinator's Ray is started with those that shape a Ray
    (``num_cpus``, ``resources``, ``object_store_memory``, ``_temp_dir``, ...; no dashboard unless
    ``include_dashboard=True``). Those of a Ray job (``namespace``, ``job_config``, the logging
    ones, ``runtime_env``, ``log_to_driver``) connect this program's own driver to that Ray at
    once, as ``ray.init`` connects it; without them it joins on first use (``ray.data``, a task,
    ``ray.init()``). Where a keyword cannot apply (a coordinator's address, or a Ray the program
    started before), one warning names it.

    Args:
        address: ``host:port`` of a running coordinator; ``"auto"`` or ``"local"`` (or None) start
            an embedded one, on the Ray that ``ray.init(address=)`` would find or start.
        num_cpus: As ``ray.init``, the logical CPUs of the embedded coordinator's Ray.
        ignore_reinit_error: Return the existing client when called again, instead of raising
            ``RuntimeError`` (as ``ray.init``).
        log_to_driver: Print the workers' output during ``fit()``, as ``ray.init(log_to_driver=)``
            (default: on, or ``TRAINWIRE_LOG_TO_DRIVER=0`` for off).
        runtime_env: The runtime environment of every run whose RunConfig gives none, as
            ``ray.init(runtime_env=)`` (on the embedded default, the program's own Ray job's too).
        store: Shared store of an embedded coordinator.
        state: Metadata store of an embedded coordinator.
        token: Bearer token for a coordinator that requires one (or ``TRAINWIRE_TOKEN``).
        **kwargs: ``ray.init``'s hidden keywords (``_temp_dir``, ``_system_config``, ...).

    The other keywords are ``ray.init``'s, with its meaning.

    Raises:
        UnknownKeywordError: A keyword ``ray.init`` does not take (a ``TypeError`` and a ``RuntimeError``).
        RuntimeError: Called again without ``ignore_reinit_error`` (``shutdown()`` first to start anew).
    """
    global _client
    values = dict(locals())
    given = _given_ray_keywords({name: values[name] for name in _DEFAULTS}, kwargs)
    if local_mode:  # as ray.init refuses it, before anything starts
        raise RuntimeError("`local_mode` is no longer supported (as in Ray 2.60).")
    if kwargs.get("storage"):
        raise RuntimeError("Cluster-wide storage configuration has been removed (as in Ray 2.60).")
    with _lock:
        if _client is not None:
            if ignore_reinit_error:
                logger.info("trainwire.init() called again; keeping the client to %s", _client.address)
                return _client
            raise RuntimeError(
                "Maybe you called trainwire.init twice by accident? This error can be suppressed by passing in "
                "'ignore_reinit_error=True' or by calling 'trainwire.shutdown()' prior to 'trainwire.init()'."
            )
        checked_env = None
        if runtime_env is not None:
            from trainwire.runtime_env import check

            checked_env = check(runtime_env)
        ray_address = address if address in RAY_ADDRESSES else None
        coordinator = None if address in (None, *RAY_ADDRESSES) else address
        if coordinator is None and address != "local":
            coordinator = os.environ.get("TRAINWIRE_ADDRESS") or None
        if coordinator is not None:
            _warn_ignored(given, f"the coordinator at {coordinator} has its own Ray", stacklevel=2)
        else:
            coordinator = _start_embedded(store, state, ray_address, given)
        _client = CoordinatorClient(coordinator, token=token or os.environ.get("TRAINWIRE_TOKEN"))
        if log_to_driver is not None:
            settings["log_to_driver"] = log_to_driver
        if checked_env is not None:
            settings["runtime_env"] = checked_env
        return _client


# Defaults of init()'s named parameters, against which a caller's ray.init keywords are judged.
_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(init).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY or name == "address"
}

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
    return _client if _client is not None else init(ignore_reinit_error=True)


def shutdown() -> None:
    """Closes the client and stops an embedded coordinator and its Ray (this program's driver leaves it first)."""
    global _client, _embedded, _exported_ray_address
    with _lock:
        if _client is not None:
            _client.close()
            _client = None
        ray = sys.modules.get("ray")
        if _exported_ray_address and ray is not None and ray.is_initialized():
            if ray.get_runtime_context().gcs_address == _exported_ray_address:
                # Before its Ray stops: a driver whose cluster is gone waits for it to come back.
                ray.shutdown()
        if _embedded is not None:
            proc, _embedded = _embedded, None  # first, so the supervisor does not start it again
            proc.terminate()
            try:
                proc.wait(10)  # it exits within 8 s of SIGTERM
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if _exported_ray_address:
            if os.environ.get("RAY_ADDRESS") == _exported_ray_address:
                del os.environ["RAY_ADDRESS"]  # a later ray.init() starts a Ray of its own
            _exported_ray_address = ""
