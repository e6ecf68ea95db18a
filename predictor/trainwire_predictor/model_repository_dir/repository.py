"""``ModelDirectory``: a Triton / MLServer model repository (a local directory or ``s3://``) as served models.

Layout (Triton's)::

    <repository>/<model name>/config.pbtxt           optional: platform/backend, inputs, outputs, version_policy,
                                                     max_batch_size, dynamic_batching, instance_group
    <repository>/<model name>/model-settings.json    optional, MLServer's: implementation, parameters.uri, ...
    <repository>/<model name>/<version>/<model file>  versions are integer folders (1, 2, ...)

A model folder with no version folders but a ``model-settings.json`` is MLServer's own layout:
the folder is the model's one version, 1. A ``model-settings.json`` naming MLServer's MLflow
runtime points the folder at an MLflow model URI instead: its versions, aliases and files are
MLflow's, loaded as the predictor's MLflow models are (``MlflowModels``: the same flavors and trust
rules, the ``mlflow_*`` settings). Each model shows to the predictor's repository as a
run of its own (``CheckpointIndex``): its served versions (Triton's ``version_policy``, the newest
one by default) are its checkpoints, the newest its default version. Blocking calls throughout:
the repository runs them in threads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import posixpath
import tempfile
import threading
import time
from dataclasses import dataclass

import pyarrow.fs as pafs

from trainwire.predictor import Predictor
from trainwire_core import frameworks
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from trainwire_core.storage import MANIFEST_NAME, Store, is_path_component
from trainwire_core.store_documents import CheckpointIndex, IndexedCheckpoint, RegistryState
from trainwire_predictor.mlflow_models import MlflowModels, parse_uri
from trainwire_predictor.model_repository_dir.config import (
    DEFAULT_FILES,
    MLSERVER_SETTINGS,
    SUFFIXES,
    TRITON_CONFIG,
    ModelSettings,
    parse_mlserver,
    parse_triton,
)
from trainwire_predictor.model_repository_dir.loaders import apply_scheduling, load_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    """One model folder as the repository index shows it.

    Attributes:
        name: The model's name (its folder's).
        versions: Its served versions, oldest first.
        error: Why it cannot be served ("" where it can): a bad configuration, no version folder.
    """

    name: str
    versions: tuple[int, ...]
    error: str = ""


class ModelDirectory:
    """Resolves and loads the models of a model repository directory.

    Args:
        uri: A local directory, ``file://`` or ``s3://`` URI (as the shared store takes).
        trust_pickles: Load scikit-learn pickles and joblib files (code from the repository).
        refresh_s: Age after which the list of model folders is read again.
        cache_dir: Where compiled tree models are kept (default: a new temporary directory).
        mlflow_uri: The MLflow tracking server and registry of folders pointing at MLflow models
            ("": MLflow's default, ``MLFLOW_TRACKING_URI``).
        mlflow_trust_pickles: Load such models' pickles (as the ``mlflow_trust_pickles`` setting).
        mlflow_trust_code: Load such ``python_function`` models (as ``mlflow_trust_code``).

    Raises:
        ValueError: A local directory that does not exist.
    """

    def __init__(
        self,
        uri: str,
        *,
        trust_pickles: bool = False,
        refresh_s: float = 1.0,
        cache_dir: str = "",
        mlflow_uri: str = "",
        mlflow_trust_pickles: bool = False,
        mlflow_trust_code: bool = False,
    ) -> None:
        local = uri[len("file://") :] if uri.startswith("file://") else uri if "://" not in uri else ""
        if local and not os.path.isdir(os.path.expanduser(local)):
            raise ValueError(f"model repository {uri!r} is not a directory")
        self.store = Store(uri)
        self.uri = uri
        self.trust_pickles = trust_pickles
        self.refresh_s = refresh_s
        self._names: frozenset[str] = frozenset()
        self._skipped: set[str] = set()
        self._listed_at = float("-inf")
        self._lock = threading.Lock()
        # Model name -> its configuration as last read (what a load of it follows).
        self._settings: dict[str, ModelSettings] = {}
        # (name, version) -> the loaded file's sha256 and size (the compile cache's key, the cache's budget).
        self._files: dict[tuple[str, str], tuple[str, int]] = {}
        self._cache_dir = cache_dir
        # Folders pointing at MLflow models: resolved and loaded by one MlflowModels, each under its
        # URI as served name (a download is keyed by URI and version: a folder moved to another URI
        # never reuses the old one's files).
        self._mlflow_settings = (mlflow_uri, mlflow_trust_pickles, mlflow_trust_code)
        self._mlflow: MlflowModels | None = None

    # --- model folders ----------------------------------------------------------
    def _shown(self, path: str) -> str:
        """A path as messages show it: a local path, or ``s3://bucket/key`` without credentials or options."""
        return path if self.store.is_local else f"s3://{path.lstrip('/')}"

    def _entries(self, path: str) -> list[pafs.FileInfo]:
        return self.store.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))

    def stale(self) -> bool:
        """Whether the list of model folders is due to be read again."""
        return time.monotonic() - self._listed_at >= self.refresh_s

    def refresh(self) -> frozenset[str]:
        """Reads the list of model folders (blocking); folders whose names are not plain are skipped.

        Where the listing fails (an object store out of reach), the last list stands until the next
        refresh: the models loaded go on serving.
        """
        names = set()
        try:
            entries = self._entries(self.store.root)
        except OSError as exc:
            logger.warning("cannot list the model repository %s: %s", self._shown(self.store.root), exc)
            with self._lock:
                self._listed_at = time.monotonic()
            return self._names
        for info in entries:
            name = posixpath.basename(info.path)
            if info.type != pafs.FileType.Directory or name.startswith("."):
                continue
            if not is_path_component(name):
                if name not in self._skipped:  # once per folder, not once per refresh
                    self._skipped.add(name)
                    logger.warning(
                        "model repository %s: skipping folder %r (not a plain name)", self._shown(self.store.root), name
                    )
                continue
            names.add(name)
        with self._lock:
            self._names = frozenset(names)
            self._listed_at = time.monotonic()
        return self._names

    def handles(self, name: str) -> bool:
        """Whether ``name`` is a model folder of the repository (as last listed)."""
        return name in self._names

    def _model_dir(self, name: str) -> str:
        if not is_path_component(name):
            raise NotFoundError(f"model {name!r} not found", field="model_name")
        return self.store.path(name)

    def settings(self, name: str) -> tuple[ModelSettings, list[int]]:
        """A model folder's configuration and every integer version folder in it (blocking).

        Raises:
            FailedPreconditionError: Its configuration file cannot be read as one (the file is named).
        """
        directory = self._model_dir(name)
        versions, files = [], set()
        for info in self._entries(directory):
            base = posixpath.basename(info.path)
            if info.type == pafs.FileType.Directory and base.isdigit() and int(base) > 0:
                versions.append(int(base))
            elif info.type == pafs.FileType.File:
                files.add(base)
        if TRITON_CONFIG in files:
            path = f"{directory}/{TRITON_CONFIG}"
            settings = parse_triton(self._text(path), self._shown(path))
        elif MLSERVER_SETTINGS in files:
            path = f"{directory}/{MLSERVER_SETTINGS}"
            settings = parse_mlserver(self._text(path), self._shown(path))
            if not versions:
                settings = dataclasses.replace(settings, flat=True)
        else:
            settings = ModelSettings()
        return settings, [1] if settings.flat else versions

    def _text(self, path: str) -> str:
        try:
            return self.store.read_bytes(path).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FailedPreconditionError(f"model repository configuration {self._shown(path)}: {exc}") from None

    def read(self, name: str) -> tuple[CheckpointIndex | None, RegistryState]:
        """The model's served versions as a checkpoint index (None: no such model) (blocking).

        Raises:
            FailedPreconditionError: Its configuration is bad (naming the file), or no version is served.
        """
        if not self.handles(name):
            return None, RegistryState(run_id=name)
        settings, found = self.settings(name)
        self._settings[name] = settings
        if settings.mlflow_uri:
            return self._read_mlflow(name, settings)
        served = settings.policy.select(found)
        if not served:
            raise FailedPreconditionError(
                f"model {name!r} of the model repository {self._shown(self.store.root)} has no version to serve: "
                "version folders "
                f"{', '.join(map(str, sorted(found))) or 'none'}, version policy {settings.policy.describe()}",
                field="model_name",
            )
        ids = [str(v) for v in served]
        checkpoints = tuple(IndexedCheckpoint(id=v, index=i, version=int(v)) for i, v in enumerate(ids))
        index = CheckpointIndex(run_id=name, run_name=name, checkpoints=checkpoints, latest=ids[-1], best=ids[-1])
        return index, RegistryState(run_id=name)

    def mlflow(self, uri: str) -> MlflowModels:
        """The MLflow models of pointing folders, with ``uri`` among its served names."""
        with self._lock:
            if self._mlflow is None:
                tracking, pickles, code = self._mlflow_settings
                self._mlflow = MlflowModels(tracking, trust_pickles=pickles, trust_code=code)
            if uri not in self._mlflow.served:
                self._mlflow.served[uri] = parse_uri(uri)
            return self._mlflow

    def _read_mlflow(self, name: str, settings: ModelSettings) -> tuple[CheckpointIndex | None, RegistryState]:
        """A pointing folder's versions and aliases: its MLflow model's, under the folder's name."""
        try:
            index, state = self.mlflow(settings.mlflow_uri).read(settings.mlflow_uri)
        except InvalidArgumentError as exc:
            raise FailedPreconditionError(f"{settings.source}: {exc.message}", field="model_name") from None
        if index is None:
            raise FailedPreconditionError(
                f"model {name!r}: {settings.source} names {settings.mlflow_uri!r}, which the MLflow registry "
                "does not hold (no such model, version or alias)",
                field="model_name",
            )
        index = dataclasses.replace(index, run_id=name, run_name=name)
        return index, RegistryState(run_id=name, aliases=dict(state.aliases))

    def listing(self) -> list[Listed]:
        """Every model folder, its served versions or why it has none (blocking)."""
        out = []
        for name in sorted(self.refresh()):
            try:
                index, _ = self.read(name)
                out.append(Listed(name, tuple(c.version for c in index.checkpoints) if index else ()))
            except FailedPreconditionError as exc:
                out.append(Listed(name, (), exc.message))
        return out

    # --- loading ---------------------------------------------------------------
    def _version_dir(self, name: str, version: str, settings: ModelSettings) -> str:
        directory = self._model_dir(name)
        return directory if settings.flat else f"{directory}/{version}"

    def model_file(self, name: str, version: str) -> tuple[str, str]:
        """The (framework, store path) of a version's model file (blocking).

        Raises:
            FailedPreconditionError: No model file, several candidates, or one of no known kind.
        """
        settings = self._settings.get(name) or self.settings(name)[0]
        directory = self._version_dir(name, version, settings)
        files = sorted(
            posixpath.basename(info.path) for info in self._entries(directory) if info.type == pafs.FileType.File
        )
        where = self._shown(directory)
        if settings.filename:
            chosen = settings.filename
            if chosen not in files:
                raise FailedPreconditionError(f"{where} has no file {chosen!r} (named by {settings.source})")
        else:
            defaults = DEFAULT_FILES.get(settings.framework, ())
            candidates = [f for f in files if f in defaults] or [
                f
                for f in files
                if posixpath.splitext(f)[1] in SUFFIXES
                and (not settings.framework or SUFFIXES[posixpath.splitext(f)[1]] == settings.framework)
                and f not in (MLSERVER_SETTINGS, MANIFEST_NAME)
            ]
            if len(candidates) != 1:
                known = ", ".join(sorted(SUFFIXES))
                raise FailedPreconditionError(
                    f"{where} holds {'no' if not candidates else 'several'} model files"
                    + (f" ({', '.join(candidates)})" if candidates else f" (files ending {known})")
                    + "; name one in config.pbtxt (default_model_filename) or model-settings.json (parameters.uri)"
                )
            chosen = candidates[0]
        framework = settings.framework or SUFFIXES.get(posixpath.splitext(chosen)[1], "")
        if not framework:
            raise FailedPreconditionError(
                f"cannot tell the framework of {where}/{chosen}: name it in config.pbtxt (platform or backend) "
                f"or model-settings.json (implementation), or use a file ending {', '.join(sorted(SUFFIXES))}"
            )
        return framework, f"{directory}/{chosen}"

    def load(self, name: str, version: str) -> tuple[str, Predictor]:
        """Loads one version with its framework's own loader; (framework, Predictor) (blocking)."""
        # Read again: a folder pointed at another MLflow model (a deployment updated) loads the new one.
        settings = self._settings[name] = self.settings(name)[0]
        if settings.mlflow_uri:
            uri = settings.mlflow_uri
            framework, predictor = self.mlflow(uri).load(uri, version)
            # The tree compiler's cache key: an MLflow version's files never change.
            self._files[(name, version)] = (hashlib.sha256(f"mlflow\0{uri}\0{version}".encode()).hexdigest(), 0)
            return framework, predictor
        framework, path = self.model_file(name, version)
        data = self.store.read_bytes(path)
        settings = self._settings.get(name) or ModelSettings()
        predictor = load_model(framework, data, settings, self.trust_pickles, self._shown(path))
        predictor = apply_scheduling(predictor, settings, name)
        self._files[(name, version)] = (hashlib.sha256(data).hexdigest(), len(data))
        return framework, predictor

    def size(self, name: str, version: str) -> int:
        """The loaded model file's bytes (0 before it loaded)."""
        return self._files.get((name, version), ("", 0))[1]

    def compile_location(self, name: str, version: str, framework: str) -> tuple[Store, str]:
        """Where the tree compiler keeps a loaded version's library: a local cache keyed by the file's sha256.

        The compiler reads the model file's hash from a manifest there (the file itself stays in
        the repository, which may be read-only), and caches the library beside it.
        """
        sha, size = self._files[(name, version)]
        if not self._cache_dir:
            self._cache_dir = tempfile.mkdtemp(prefix="trainwire-model-repository-")
        store = Store(self._cache_dir)
        directory = store.path(sha)
        manifest = f"{directory}/{MANIFEST_NAME}"
        if not store.exists(manifest):
            model_file = frameworks.get_framework(framework).model_file
            store.write_bytes(
                manifest,
                json.dumps({"files": [{"path": model_file, "size_bytes": size, "sha256": sha}]}).encode(),
            )
        return store, directory
