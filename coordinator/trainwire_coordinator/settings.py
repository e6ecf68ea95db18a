"""Coordinator settings, read from ``TRAINWIRE_COORDINATOR_*`` environment variables."""

from __future__ import annotations

import os

from pydantic_settings import BaseSettings, SettingsConfigDict

# Where the embedded defaults live (the store and the metadata database).
DEFAULT_HOME = os.path.join(os.path.expanduser("~"), ".trainwire")


class CoordinatorSettings(BaseSettings):
    """Settings of one coordinator process."""

    model_config = SettingsConfigDict(env_prefix="TRAINWIRE_COORDINATOR_")

    host: str = "127.0.0.1"
    port: int = 50051
    # Shared store URI (file://, s3://) or a local path.
    store: str = os.path.join(DEFAULT_HOME, "store")
    # Metadata store: a SQLite path / sqlite:/// URL, or redis://host:port/db.
    state: str = os.path.join(DEFAULT_HOME, "state.db")
    # Ray address to connect to; empty starts a local Ray.
    ray_address: str = ""
    # CPUs of a local Ray started by the coordinator (0: Ray's default).
    ray_num_cpus: int = 0
    # Join the cluster at ray_address as a Ray node that offers no CPUs or GPUs, and drive
    # it from there: a Ray driver needs a local raylet and object store (a container of its own).
    ray_join_node: bool = False
    # host:port that workers dial for their report streams, e.g. coordinator:50051 (a compose
    # service name). Empty: the bound host, or this node's IP when bound to 0.0.0.0.
    advertise_address: str = ""
    # Accept cloudpickled training code (code execution on the cluster).
    allow_pickled_code: bool = True
    # Install a run's runtime_env pip requirements on the workers (code from a package index).
    allow_pip_installs: bool = True
    # Package indexes a runtime_env pip line may name (--index-url, --extra-index-url, -i);
    # empty: none, the workers' own pip configuration decides.
    pip_allowed_index_urls: list[str] = []
    # Estimator classes a declarative trainer may name without the submit-code scope, as
    # fnmatch patterns over "module.Class" (each must also be a scikit-learn estimator); the
    # train loops that installed packages declare in the "trainwire.train_loops" entry-point
    # group are allowed too. A submit-code token may name any class or entry point.
    allowed_estimator_classes: list[str] = ["sklearn.*"]
    # Where a request may name data beyond the store (storage_path, resume_from_checkpoint,
    # dataset URIs): URI prefixes such as "s3://team-data/" or "file:///srv/data/". Empty: the
    # store and uploads only.
    allowed_path_prefixes: list[str] = []
    # Largest runtime-environment package (zip) accepted, in bytes.
    max_package_bytes: int = 100 * 1024 * 1024
    # The most of one rank's output (per attempt) the store keeps; older lines are rotated away.
    log_max_bytes_per_rank: int = 64 * 1024 * 1024
    # A Ray Data dataset whose files are at most this size is read once per attempt and kept in
    # Ray's object store, so each epoch iterates blocks in memory instead of reading the files again
    # (0: always stream from the files).
    materialize_datasets_below_bytes: int = 64 * 1024 * 1024
    # When set, every call must carry "authorization: Bearer <token>".
    auth_token: str = ""
    # Listen beyond loopback without auth_token (refused unless set: Fit runs code on the cluster).
    allow_unauthenticated: bool = False
    # Named tokens with scopes (trainwire_core.auth): a JSON object, or the path of a file holding one.
    tokens: str = ""
    # Key of the per-run secrets that workers present on their report streams. Empty: a
    # random key per process. Set it (secretly) in deployments, so a restarted
    # coordinator accepts the streams of workers that outlived its predecessor.
    report_key: str = ""
    # TLS: PEM paths of the server's certificate chain and key; with a client CA, mutual TLS.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # The CA that verifies this coordinator's certificate, given to workers for their report
    # streams; empty: they trust tls_cert itself (a self-signed certificate).
    tls_ca: str = ""
    max_message_bytes: int = 64 * 1024 * 1024
    # MLflow tracking URI (http://host:port): every run is logged there (params, metrics, status,
    # best checkpoint), from a thread of its own; empty: none. MLFLOW_EXPERIMENT_NAME names the
    # experiment (default "trainwire").
    mlflow_uri: str = ""
    # The largest checkpoint (all its files, in bytes) that the mlflow_uri tracker uploads as a
    # run's model artifact; a bigger one is logged by its URI only (tag), with a warning.
    mlflow_max_artifact_bytes: int = 1024 * 1024 * 1024
    # Port of the Prometheus metrics endpoint (GET /metrics on host); 0: none.
    metrics_port: int = 0
    # How long a watcher waits before polling the metadata store again
    # (events written by another coordinator on the same Redis).
    watch_poll_s: float = 1.0
    # How long idle warm workers of declarative trainers are kept (0: never); they hold
    # their CPUs meanwhile, so other Ray work on the cluster may wait that long.
    worker_pool_idle_s: float = 10.0
    # How long a Fit whose workers need more than the whole cluster has waits for nodes to
    # join (a node still starting or restarting) before it is refused with RESOURCE_EXHAUSTED.
    capacity_wait_s: float = 30.0
    # Seconds a placement group may wait before the reason is shown.
    pending_reason_after_s: float = 1.0
    # Ranks still running this long after another rank finished are named in the run's state
    # reason (a rank blocked on a shard read or in a collective waits for peers that stopped).
    stall_reason_after_s: float = 60.0
    # Fail such an attempt after this long instead of waiting on (0: never).
    stall_fail_after_s: float = 0.0
    # Set by trainwire.init() for the coordinator it embeds in a program: the runs end with
    # that program, and runs another program's embedded coordinator left are not taken over.
    embedded_owner: str = ""
