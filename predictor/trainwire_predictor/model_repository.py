"""Resolves model names to committed checkpoints and keeps loaded models in an LRU cache.

The shared store's committed index (``runs/<id>/checkpoints.json``) is the only
source of truth, so any number of predictors can serve one store without
talking to each other. Checkpoints are immutable: a loaded model is cached by
(run id, checkpoint id) and never re-read. Before its first load a checkpoint's
files are checked against its manifest (size, sha256), once per process.

XGBoost and LightGBM models are also compiled (``compiled_trees``) as part of
their first load, off the event loop: the load waits for the library (compiled
here, or the store's cached one) and the model serves the compiled forest from
its first answer. Compiled outputs agree with the framework's within 1e-6 but
not bit for bit, so serving the framework meanwhile and switching later would
let one model version answer one input two ways within a process. The wait is
the compile once per model for the whole store (typically a second or two;
replicas and restarts load the cached library in milliseconds); where
compiling fails the framework serves.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from trainwire.checkpoint import DICT_CHECKPOINT_NAME, PREPROCESSOR_NAME, Checkpoint
from trainwire.predictor import Predictor
from trainwire_core import frameworks
from trainwire_core.errors import DataLossError, FailedPreconditionError, NotFoundError, TrainwireError
from trainwire_core.inference.codec import NUMERIC, datatype_of
from trainwire_core.manifest import is_code_trusted, read_manifest, verify_checkpoint
from trainwire_core.storage import MANIFEST_NAME, RUN_ID_RE, Store
from trainwire_core.store_documents import CheckpointIndex, RegistryState
from trainwire_predictor.compiled_trees import CompileResult, TreeCompiler, supports
from trainwire_predictor.mlflow_models import MlflowModels
from trainwire_predictor.model_repository_dir import ModelDirectory
from trainwire_predictor.models import LoadedModel, ModelRef, Resolution, TensorSpec

logger = logging.getLogger(__name__)

_MAX_CACHED_NAMES = 10_000


def detect_framework(store: Store, directory: str) -> str:
    """The framework of a checkpoint: the one its manifest or metadata names, if its model file is there.

    Checkpoints that name none (uploads, older ones) or another whose files they
    lack (a Transformers model saved from a torch loop) go by the first model file
    of ``trainwire.frameworks`` they hold.
    """
    table = frameworks.frameworks()
    named = ""
    for name in (MANIFEST_NAME, ".metadata.json"):
        path = f"{directory}/{name}"
        if store.exists(path):
            named = str(store.read_json(path).get("framework") or "")
            if named in table:
                break
    declared = table.get(named)
    if (
        declared is not None
        and declared.platform
        and (not declared.model_file or store.exists(f"{directory}/{declared.model_file}"))
    ):
        return named
    for candidate in table.values():
        if candidate.model_file and store.exists(f"{directory}/{candidate.model_file}"):
            return candidate.name
    if named:
        return named
    raise FailedPreconditionError(f"cannot tell the framework of checkpoint {store.uri_of(directory)}")


# Checkpoint files any framework's loader unpickles when present.
PICKLED_FILES = (PREPROCESSOR_NAME, DICT_CHECKPOINT_NAME)


def _parsed(parse: Callable[[Any], Any], data: Any, default: Any) -> Any:
    """A store document parsed, or ``default`` where it is absent or unreadable (logged: a replica serves on)."""
    if data is None:
        return default
    try:
        return parse(data)
    except DataLossError as exc:
        logger.warning("%s", exc)
        return default


def check_code_trusted(store: Store, directory: str, declared: frameworks.Framework) -> None:
    """Refuses to load pickles from a checkpoint no authorised caller vouched for (an upload without submit-code).

    Raises:
        FailedPreconditionError: The checkpoint needs unpickling and its manifest does not trust it.
    """
    pickled = [name for name in PICKLED_FILES if store.exists(f"{directory}/{name}")]
    if declared.unpickles:
        pickled.insert(0, declared.model_file or "its model folder")
    if pickled and not is_code_trusted(store, directory):
        raise FailedPreconditionError(
            f"its {declared.name} checkpoint holds pickled files ({', '.join(pickled)}) and was uploaded without "
            "the 'submit-code' scope; loading them would run the uploader's code. Upload it again with a "
            "submit-code token, or upload a model file that is data (XGBoost, LightGBM)"
        )


def load_predictor(store: Store, run_id: str, checkpoint_id: str) -> tuple[str, Predictor]:
    """Loads one committed checkpoint with its framework's Predictor (blocking).

    The caller has checked the files against the manifest (``ModelRepository``
    does, once per checkpoint), so the Predictor does not hash them again.
    """
    directory = store.checkpoint_dir(run_id, checkpoint_id)
    framework = detect_framework(store, directory)
    declared = frameworks.frameworks().get(framework)
    if declared is None or not declared.platform:
        raise FailedPreconditionError(
            f"the predictor cannot serve {framework!r} checkpoints; it serves {', '.join(frameworks.names())}"
        )
    check_code_trusted(store, directory, declared)
    predictor_cls = declared.predictor_class()
    kwargs = dict(declared.serving_kwargs)
    checkpoint = Checkpoint(store.uri_of(directory))
    checkpoint._verified = True
    return framework, predictor_cls.from_checkpoint(checkpoint, **kwargs)


def describe(predictor: Predictor) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The model's inputs (one per feature column, else one 2-D tensor) and outputs.

    An MLflow model's column signature names its inputs and their datatypes; a model that
    declares its tensors (a model repository's ONNX, TorchScript or configured model) is taken at its word.
    """
    declared = getattr(predictor, "declared_specs", None)
    if declared is not None:
        return list(declared[0]), list(declared[1])
    signature = getattr(predictor, "signature_specs", None)
    if signature is not None and not predictor.feature_columns:
        predictor.feature_columns = [spec.name for spec in signature[0]]
    datatype = predictor.input_datatype
    columns = predictor.feature_columns
    if not columns:
        return [TensorSpec("input", datatype, (-1, -1))], [TensorSpec("predictions", "FP32", (-1,))]
    inputs = [TensorSpec(c, datatype, (-1,)) for c in columns]
    if signature is not None and [spec.name for spec in signature[0]] == list(columns):
        inputs = list(signature[0])
    outputs = [TensorSpec("predictions", "FP32", (-1,))]
    if datatype in NUMERIC:
        # Score one zero row to learn the outputs' names and datatypes.
        try:
            dtype = np.float32 if datatype == "FP32" else np.float64
            out = predictor.predict_columns({c: np.zeros(1, dtype=dtype) for c in columns})
            outputs = [TensorSpec(name, datatype_of(arr.dtype), (-1,)) for name, arr in out.items()]
        except Exception:  # noqa: BLE001 - a probe only; the default stands
            logger.debug("output probe failed", exc_info=True)
    return inputs, outputs


class ModelRepository:
    """Name/version resolution through the committed index, and the loaded-model cache.

    Args:
        store: The shared store the coordinator commits to.
        cache_size: Loaded checkpoints kept (least recently used dropped first).
        cache_bytes: Most bytes of loaded checkpoints kept (their files' sizes); 0: no limit. The
            least recently used go first, never one with requests in flight.
        index_refresh_s: Age after which a cached index or name is read again.
        loader: Loads (store, run_id, checkpoint_id) -> (framework, Predictor); tests inject fakes.
        prepare: Run on each loaded model in a thread before it serves (e.g. ``prepare_batched``).
        compile_tree_models: Compile XGBoost and LightGBM models for serving (else the framework predicts).
        compiler: Compiles and caches the libraries (default: a ``TreeCompiler``).
        mlflow: Resolves and loads MLflow models (``mlflow:<name>`` and served names); None: none served.
        directory: A model repository directory's models (``--model-repository``); None: none served.
            A name resolves to an MLflow served name first, then to a model folder, then to a run
            (a run whose name a model folder takes stays reachable by its run id).
    """

    def __init__(
        self,
        store: Store,
        *,
        cache_size: int = 16,
        cache_bytes: int = 0,
        index_refresh_s: float = 1.0,
        loader: Callable[[Store, str, str], tuple[str, Predictor]] = load_predictor,
        prepare: Callable[[LoadedModel], None] | None = None,
        compile_tree_models: bool = False,
        compiler: TreeCompiler | None = None,
        mlflow: MlflowModels | None = None,
        directory: ModelDirectory | None = None,
    ) -> None:
        self.store = store
        self.mlflow = mlflow
        self.directory = directory
        # Why a model version last failed to load (the repository index's reason), until it loads.
        self._failures: dict[tuple[str, str], str] = {}
        self.cache_size = max(1, cache_size)
        self.cache_bytes = max(0, cache_bytes)
        self.evictions = 0
        self.index_refresh_s = index_refresh_s
        self.loader = loader
        self.prepare = prepare
        self.loads: collections.Counter[tuple[str, str]] = collections.Counter()
        self.verifications: collections.Counter[tuple[str, str]] = collections.Counter()
        # Manifest checks, once per checkpoint: passed, or the mismatch found (checkpoints are immutable).
        self._verified: set[tuple[str, str]] = set()
        self._corrupt: dict[tuple[str, str], DataLossError] = {}
        self._cache: dict[tuple[str, str], LoadedModel] = {}
        self._loading: dict[tuple[str, str], asyncio.Task[LoadedModel]] = {}
        self._names: dict[str, tuple[float, str | None]] = {}
        self._indexes: dict[str, tuple[float, CheckpointIndex | None]] = {}
        self._registries: dict[str, tuple[float, RegistryState]] = {}
        # Model name -> what it means until its reads are due again (one build per refresh).
        self._resolutions: dict[str, Resolution] = {}
        # Run id -> its loaded checkpoints by id: the live mapping each Resolution of the run shows.
        self._loaded_by_run: dict[str, dict[str, LoadedModel]] = {}
        self._reads: dict[str, asyncio.Task[Any]] = {}
        self.compile_tree_models = compile_tree_models
        self._compiler = compiler
        # One compile at a time (each already uses every core, and serving goes on meanwhile); per event loop.
        self._compile_slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    @property
    def load_count(self) -> int:
        """Checkpoint loads started so far, all models together."""
        return sum(self.loads.values())

    # --- store reads ---------------------------------------------------------
    def _read_json_or_none(self, path: str) -> Any:
        try:
            return self.store.read_json(path)
        except NotFoundError:
            return None

    async def _read(self, path: str) -> Any:
        """Reads a JSON file off the event loop; concurrent readers of one path share the read."""
        task = self._reads.get(path)
        if task is None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._read_json_or_none, path))
            self._reads[path] = task
            task.add_done_callback(lambda _: self._reads.pop(path, None))
        return await asyncio.shield(task)

    def _fresh(self, stamp: float) -> bool:
        return time.monotonic() - stamp < self.index_refresh_s

    def _external(self, name: str) -> MlflowModels | ModelDirectory | None:
        """The source of a model that is no trainwire run (an MLflow model, a model folder), else None."""
        if self.mlflow is not None and self.mlflow.handles(name):
            return self.mlflow
        if self.directory is not None and self.directory.handles(name):
            return self.directory
        return None

    def _is_external(self, name: str) -> bool:
        """Whether a model is external (MLflow's or a model folder): no trainwire manifest, index or aliases file."""
        return self._external(name) is not None

    async def _shared_read(self, key: str, read: Callable[[], Any]) -> Any:
        """Runs a blocking read in a thread; concurrent callers of one key share it."""
        task = self._reads.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(read))
            self._reads[key] = task
            task.add_done_callback(lambda _: self._reads.pop(key, None))
        return await asyncio.shield(task)

    async def _read_external(self, name: str) -> None:
        """Reads an external model's versions and aliases into the index and registry caches (one read at a time)."""
        source = self._external(name)
        assert source is not None
        key = f"\0external\0{name}"
        task = self._reads.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(source.read, name))
            self._reads[key] = task
            task.add_done_callback(lambda _: self._reads.pop(key, None))
        index, state = await asyncio.shield(task)
        now = time.monotonic()
        self._indexes[name] = (now, index)
        self._registries[name] = (now, state)
        self._forget(name)

    async def _run_id(self, name: str) -> str | None:
        cached = self._names.get(name)
        if cached is not None and self._fresh(cached[0]):
            return cached[1]
        if self.directory is not None and self.directory.stale():
            await self._shared_read("\0directory", self.directory.refresh)
        if self._is_external(name):
            # An MLflow model is its own "run": its versions are the index, its aliases the registry.
            found = await self._index(name) is not None
            self._names[name] = (time.monotonic(), name if found else None)
            return name if found else None
        entry = await self._read(self.store.name_path(name))
        run_id = entry.get("run_id") if isinstance(entry, dict) else None
        # Only a plain path component can be a run id: anything else must not reach a store path.
        if run_id is None and RUN_ID_RE.match(name) and await self._index(name, refresh=True) is not None:
            run_id = name  # the name is a run id
        if len(self._names) >= _MAX_CACHED_NAMES:
            self._names.clear()  # callers choose names: keep the cache bounded
        self._names[name] = (time.monotonic(), run_id)
        return run_id

    async def _index(self, run_id: str, refresh: bool = False) -> CheckpointIndex | None:
        cached = self._indexes.get(run_id)
        if cached is not None and not refresh and self._fresh(cached[0]):
            return cached[1]
        if self._is_external(run_id):
            await self._read_external(run_id)
            return self._indexes[run_id][1]
        index = _parsed(CheckpointIndex.from_json, await self._read(self.store.index_path(run_id)), None)
        self._indexes[run_id] = (time.monotonic(), index)
        self._forget(run_id)
        return index

    async def registry(self, run_id: str, refresh: bool = False) -> RegistryState:
        """The run's aliases and traffic policy (empty where none were set), read again after ``index_refresh_s``."""
        cached = self._registries.get(run_id)
        if cached is not None and not refresh and self._fresh(cached[0]):
            return cached[1]
        if self._is_external(run_id):
            await self._read_external(run_id)
            return self._registries[run_id][1]
        state = _parsed(RegistryState.from_json, await self._read(self.store.aliases_path(run_id)), RegistryState())
        self._registries[run_id] = (time.monotonic(), state)
        self._forget(run_id)
        return state

    async def run_of(self, name: str) -> str | None:
        """The run id a model name means (None: no such run)."""
        return await self._run_id(name) if name else None

    # --- the request path without awaiting --------------------------------------
    def resolution_now(self, name: str) -> Resolution | None:
        """What ``name`` means, from fresh cached reads (None: await ``resolution``); nothing is read or awaited."""
        known = self._resolutions.get(name)
        if known is not None and time.monotonic() < known.fresh_until:
            return known
        limit = time.monotonic() - self.index_refresh_s
        named = self._names.get(name)
        if named is None or named[0] <= limit or named[1] is None:
            return None
        indexed, registry = self._indexes.get(named[1]), self._registries.get(named[1])
        if indexed is None or indexed[0] <= limit or registry is None or registry[0] <= limit:
            return None
        return self._resolved(name, named[1], indexed, registry)

    async def resolution(self, name: str) -> Resolution | None:
        """What ``name`` means, read again where a read is due (None: no such model; ``get`` says why)."""
        run_id = await self.run_of(name)
        if run_id is None or not await self._index(run_id):
            return None
        await self.registry(run_id)
        known = self.resolution_now(name)
        if known is not None:
            return known
        # A read older than the interval (a slow store): build from what was just read all the same.
        return self._resolved(name, run_id, self._indexes[run_id], self._registries[run_id])

    def _resolved(
        self,
        name: str,
        run_id: str,
        indexed: tuple[float, CheckpointIndex | None],
        registry: tuple[float, RegistryState],
    ) -> Resolution | None:
        index, state = indexed[1], registry[1]
        if index is None or not index.checkpoints:
            return None
        ids = index.ordered_ids
        # Aliases first, so a checkpoint id wins over an alias of the same name; one not committed is left to get.
        checkpoints = {alias: target for alias, target in state.aliases.items() if target in index.ids}
        checkpoints.update({str(number): checkpoint for checkpoint, number in index.numbers.items()})
        checkpoints.update({checkpoint: checkpoint for checkpoint in ids})
        checkpoints[""] = index.default_version()
        stamp = min(self._names[name][0], indexed[0], registry[0])
        if len(self._resolutions) >= _MAX_CACHED_NAMES:
            self._resolutions.clear()  # callers choose names: keep it bounded
        known = self._resolutions[name] = Resolution(
            name,
            run_id,
            index.run_name,
            ids,
            checkpoints,
            state.route,
            self._loaded_by_run.setdefault(run_id, {}),
            stamp + self.index_refresh_s,
        )
        return known

    def _forget(self, run_id: str) -> None:
        """Drops the resolutions resting on a run's earlier reads (a read came back)."""
        for name in [name for name, known in self._resolutions.items() if known.run_id == run_id]:
            del self._resolutions[name]

    # --- resolution ------------------------------------------------------------
    async def resolve(self, name: str, version: str = "") -> ModelRef:
        """The checkpoint a (model name, version) pair means right now; ``version`` may be an alias.

        A checkpoint id wins over an alias of the same name (the registry refuses such aliases).

        Raises:
            NotFoundError: No run of that name or id has a committed checkpoint,
                or the run has no checkpoint or alias ``version``.
        """
        if not name:
            raise NotFoundError("a model name is required (a run name or run id)", field="model_name")
        run_id = await self._run_id(name)
        index = await self._index(run_id) if run_id else None
        if index is None or not index.checkpoints:
            raise NotFoundError(
                f"model {name!r} not found: no run with that name or id has a committed checkpoint",
                field="model_name",
            )
        if not version:
            version = index.default_version()
        elif version not in index.ids and version.isdigit():
            version = await self._numbered(run_id, index, version)
        elif version not in index.ids:
            aliased = (await self.registry(run_id)).aliases.get(version)
            if aliased is None:
                # An alias set since the last read: look again before saying no.
                aliased = (await self.registry(run_id, refresh=True)).aliases.get(version)
            alias, version = (version, aliased) if aliased is not None else ("", version)
            if version not in index.ids:
                # A checkpoint committed since the last read: look again before saying no.
                index = await self._index(run_id, refresh=True) or index
            ids = index.ordered_ids
            if version not in index.ids:
                if alias:
                    raise NotFoundError(
                        f"alias {alias!r} of model {name!r} points to version {version!r}, which is not committed",
                        field="model_version",
                    )
                raise NotFoundError(
                    f"model {name!r} has no version {version!r}; committed versions: {', '.join(ids)} "
                    f"(and no alias {version!r})",
                    field="model_version",
                )
        return ModelRef(run_id, index.run_name, version, index.ordered_ids, index.numbers.get(version, 0))

    async def _numbered(self, run_id: str, index: CheckpointIndex, number: str) -> str:
        """The checkpoint id of a run's checkpoint number (a checkpoint id wins over a number: called after)."""
        for attempt in (index, await self._index(run_id, refresh=True)):
            found = next((c.id for c in attempt.checkpoints if str(c.version) == number), None) if attempt else None
            if found is not None:
                return found
        raise NotFoundError(
            f"model {index.run_name or run_id!r} has no version {number}; committed versions: "
            + ", ".join(f"{c.version} ({c.id})" for c in index.checkpoints),
            field="model_version",
        )

    # --- loading -----------------------------------------------------------
    def _verify(self, ref: ModelRef) -> None:
        """Checks a checkpoint's files against its manifest, at most once per checkpoint (blocking)."""
        if ref.key in self._verified or self._is_external(ref.run_id):
            return  # an MLflow model has no trainwire manifest: its own library reads its files
        if ref.key in self._corrupt:
            raise self._corrupt[ref.key]
        self.verifications[ref.key] += 1
        directory = self.store.checkpoint_dir(ref.run_id, ref.checkpoint_id)
        try:
            verify_checkpoint(self.store, directory, label=f"{ref.run_id}/{ref.checkpoint_id}")
        except DataLossError as exc:
            logger.error("checkpoint %s/%s is corrupt: %s", ref.run_id, ref.checkpoint_id, exc)
            self._corrupt[ref.key] = exc
            raise
        self._verified.add(ref.key)

    async def get(self, name: str, version: str = "") -> LoadedModel:
        """The loaded model for a name and version; loads it once, however many ask at a time."""
        ref = await self.resolve(name, version)
        model = self._cache.get(ref.key)
        if model is not None:
            model.used_at = time.monotonic()
            return model
        task = self._loading.get(ref.key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(name, ref))
            self._loading[ref.key] = task
            task.add_done_callback(lambda _: self._loading.pop(ref.key, None))
        return await asyncio.shield(task)

    async def _load(self, name: str, ref: ModelRef) -> LoadedModel:
        self.loads[ref.key] += 1
        started = time.monotonic()
        try:
            await asyncio.to_thread(self._verify, ref)
            source = self._external(ref.run_id)
            if source is not None:
                framework, predictor = await asyncio.to_thread(source.load, ref.run_id, ref.checkpoint_id)
            else:
                framework, predictor = await asyncio.to_thread(self.loader, self.store, ref.run_id, ref.checkpoint_id)
            inputs, outputs = await asyncio.to_thread(describe, predictor)
        except TrainwireError as exc:
            self._failures[ref.key] = exc.message
            raise type(exc)(f"model {name!r} version {ref.checkpoint_id!r}: {exc.message}", field="model_name") from exc
        except Exception as exc:  # noqa: BLE001 - a broken checkpoint must not take others down
            logger.warning("cannot load model %s version %s", name, ref.checkpoint_id, exc_info=True)
            self._failures[ref.key] = f"cannot be loaded: {type(exc).__name__}: {exc}"
            raise FailedPreconditionError(
                f"model {name!r} version {ref.checkpoint_id!r} cannot be loaded (corrupt or unreadable "
                f"checkpoint): {type(exc).__name__}: {exc}",
                field="model_name",
            ) from exc
        self._failures.pop(ref.key, None)
        model = LoadedModel(
            ref, framework, predictor, inputs, outputs, size_bytes=await asyncio.to_thread(self._size, ref)
        )
        if self.prepare is not None:
            await asyncio.to_thread(self.prepare, model)
        compiles = self._external(ref.run_id) is None or self._external(ref.run_id) is self.directory
        if self.compile_tree_models and compiles and supports(framework, predictor):
            await self._compile(model)  # never raises: the framework serves where compiling fails
        self._cache[ref.key] = model
        self._loaded_by_run.setdefault(ref.run_id, {})[ref.checkpoint_id] = model
        self._evict(keep=ref.key)
        logger.info(
            "loaded model %s (run %s) version %s in %.2f s",
            name,
            ref.run_id,
            ref.checkpoint_id,
            time.monotonic() - started,
        )
        return model

    def _size(self, ref: ModelRef) -> int:
        """The checkpoint's bytes as its manifest lists them (blocking; a model file's size; an MLflow model's: 0)."""
        if self.directory is not None and self._external(ref.run_id) is self.directory:
            return self.directory.size(ref.run_id, ref.checkpoint_id)
        if self._is_external(ref.run_id):
            return 0
        entries = read_manifest(self.store, self.store.checkpoint_dir(ref.run_id, ref.checkpoint_id))
        return sum(entry.size_bytes for entry in entries or ())

    def cached_bytes(self) -> int:
        """Bytes of the loaded checkpoints (their files' sizes)."""
        return sum(model.size_bytes for model in self._cache.values())

    def _evict(self, keep: tuple[str, str]) -> None:
        """Drops least recently used models until the count and byte budgets hold.

        A model with requests in flight is skipped (it stays, over budget, until a later load
        finds it idle), and so is ``keep``, the one just loaded.
        """

        def over() -> bool:
            too_many = len(self._cache) > self.cache_size
            return too_many or (self.cache_bytes > 0 and self.cached_bytes() > self.cache_bytes)

        for key in sorted(self._cache, key=lambda key: self._cache[key].used_at):
            if not over():
                return
            if key == keep or self._cache[key].in_flight:
                continue
            self._drop(key)
            self.evictions += 1
        if over():
            logger.warning(
                "model cache over budget (%d models, %d bytes): the rest are serving requests",
                len(self._cache),
                self.cached_bytes(),
            )

    @property
    def compiler(self) -> TreeCompiler:
        if self._compiler is None:
            self._compiler = TreeCompiler()
        return self._compiler

    async def _compile(self, model: LoadedModel) -> CompileResult:
        """Compiles (or fetches the cached library of) a loaded tree model off the event loop, and switches to it."""
        store, directory = self.store, self.store.checkpoint_dir(model.ref.run_id, model.ref.checkpoint_id)
        if self.directory is not None and self._external(model.ref.run_id) is self.directory:
            store, directory = await asyncio.to_thread(
                self.directory.compile_location, model.ref.run_id, model.ref.checkpoint_id, model.framework
            )
        loop = asyncio.get_running_loop()
        slot = self._compile_slots.get(loop)
        if slot is None:
            self._compile_slots = {loop: (slot := asyncio.Semaphore(1))}
        async with slot:
            result = await asyncio.to_thread(self.compiler.prepare, store, directory, model.framework, model.predictor)
        if result.compiled is not None:
            model.predictor.use_compiled(result.compiled)  # type: ignore[attr-defined]
            logger.info(
                "model %s version %s: serving the compiled forest (%s in %.2f s)",
                model.ref.run_id,
                model.ref.checkpoint_id,
                "compiled" if result.compiled_now else "cached library",
                result.seconds,
            )
        model.compile_result = result
        return result

    async def wait_compiled(self, name: str, version: str = "") -> CompileResult | None:
        """Loads a model (compiling it where it is a tree model); the compile outcome (None: not compiled)."""
        return (await self.get(name, version)).compile_result

    def is_loaded(self, ref: ModelRef) -> bool:
        return ref.key in self._cache

    async def unload(self, name: str, version: str = "") -> int:
        """Drops the cached checkpoints of a model (only ``version`` when given); returns how many were dropped.

        Raises:
            NotFoundError: No such model, or the model has no such version.
        """
        if version:
            ref = await self.resolve(name, version)
            keys = [ref.key] if ref.key in self._cache else []
            for key in keys:
                self._drop(key)
            return len(keys)
        run_id = await self._run_id(name)
        if run_id is None:
            raise NotFoundError(f"model {name!r} not found", field="model_name")
        if self._is_external(run_id):
            # The next load reads its versions and aliases again, as Triton's reload does: a model
            # folder pointed at another MLflow model (an mlflow deployment updated) serves the new one.
            self._indexes.pop(run_id, None)
            self._registries.pop(run_id, None)
        keys = [k for k in self._cache if k[0] == run_id]
        for key in keys:
            self._drop(key)
        return len(keys)

    def _drop(self, key: tuple[str, str]) -> None:
        self._loaded_by_run.get(key[0], {}).pop(key[1], None)
        self._cache.pop(key).release()

    # --- listing -------------------------------------------------------------
    def _read_all_indexes(self) -> list[CheckpointIndex]:
        out = []
        for run_id in sorted(self.store.list_dir(self.store.path("runs"))):
            index = CheckpointIndex.read(self.store, run_id)
            if index is not None and index.checkpoints:
                out.append(index)
        return out

    def unavailable_reason(self, ref: ModelRef) -> str:
        """Why a version the index lists is not loaded: its last load's failure, else "not loaded"."""
        return self._failures.get(ref.key, "not loaded")

    async def index(self) -> list[tuple[ModelRef, bool]]:
        """Every committed checkpoint in the store and every model folder's served versions; whether each is loaded.

        A model folder that cannot be served (a bad configuration, no version folder) is listed once,
        with no version, and ``unavailable_reason`` says why.
        """
        refs = []
        if self.directory is not None:
            for listed in await asyncio.to_thread(self.directory.listing):
                ids = tuple(map(str, listed.versions))
                if listed.error:
                    ref = ModelRef(listed.name, listed.name, "")
                    self._failures[ref.key] = listed.error
                    refs.append((ref, False))
                for number in listed.versions:
                    ref = ModelRef(listed.name, listed.name, str(number), ids, number)
                    refs.append((ref, self.is_loaded(ref)))
        for index in await asyncio.to_thread(self._read_all_indexes):
            ids = index.ordered_ids
            for ckpt_id in ids:
                ref = ModelRef(index.run_id, index.run_name, ckpt_id, ids, index.numbers[ckpt_id])
                refs.append((ref, self.is_loaded(ref)))
        return refs
