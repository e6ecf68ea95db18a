"""Tree models compiled for serving: XGBoost and LightGBM boosters as shared libraries (Treelite + TL2cgen).

A booster's ``inplace_predict`` costs a few hundred microseconds per small
batch, most of it fixed overhead; the same forest compiled to C by TL2cgen
scores 32 rows in tens of microseconds with the same outputs (within 1e-6).

The compiled library is cached beside its checkpoint in the store, under
``<checkpoint>/.compiled/`` (which manifest checks ignore), keyed by the model
file's sha256 and a platform tag, so replicas and restarts reuse it:

- ``<model sha256>-<tag>.json``: the record, written last; it names the library
  and holds the library's sha256 and size.
- ``<model sha256>-<tag>-<library sha256 prefix>.so``: the library (content-addressed,
  so two replicas compiling at once never overwrite each other's bytes).

A cached library is code that gets ``dlopen``-ed: its bytes are read once,
checked against the record's sha256, written to a private local directory and
loaded from there. Any mismatch refuses the cached copy and compiles again.
Every compiled library is also checked against the framework's own predict on
probe rows before it serves; a library that disagrees is dropped and the
framework keeps serving.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import hashlib
import logging
import os
import platform
import re
import shutil
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwire_core import frameworks
from trainwire_core.manifest import COMPILED_DIR, read_manifest
from trainwire_core.storage import Store

logger = logging.getLogger(__name__)

# Largest difference from the framework's predict a compiled library may show on the probe rows.
TOLERANCE = 1e-6
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


def supports(framework: str, predictor: Any) -> bool:
    """Whether a loaded predictor holds a booster this module can compile."""
    declared = frameworks.frameworks().get(framework)
    return (
        declared is not None
        and declared.compiles_trees
        and hasattr(predictor, "use_compiled")
        and getattr(predictor, "model", None) is not None
    )


def platform_tag() -> str:
    """What a compiled library depends on: OS and CPU, C library, and the compiler's versions."""
    import tl2cgen
    import treelite

    libc, libc_version = platform.libc_ver()
    parts = [
        sysconfig.get_platform(),
        f"{libc}{libc_version}",
        f"tl2cgen{tl2cgen.__version__}",
        f"treelite{treelite.__version__}",
    ]
    return "-".join(_TAG_UNSAFE.sub("_", p) for p in parts if p)


class CompiledTrees:
    """A compiled forest loaded from a local shared library; thread-safe.

    TL2cgen's predictor handle may be used by one thread at a time, so each
    concurrent caller takes a handle from a free list (made on demand, as many
    as there are concurrent callers).

    Args:
        libpath: The local shared library.
        out_dtype: The dtype the framework's predict returns (outputs are cast to it,
            so the advertised output datatypes stay the same).
    """

    def __init__(self, libpath: str, out_dtype: np.dtype | None = None) -> None:
        import tl2cgen
        from tl2cgen.libloader import _LIB, _check_call

        self._check = _check_call
        # The C API's functions with their argument types declared, on a handle of our own (the
        # same library, so tl2cgen's own calls keep theirs): a call then converts plain ints and
        # bytes itself, without a ctypes pointer object built per array per call.
        lib = ctypes.CDLL(_LIB._name)
        self._create = lib.TL2cgenDMatrixCreateFromMat
        self._create.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
        ]
        self._predict = lib.TL2cgenPredictorPredictBatch
        self._predict.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self._free_dmatrix = lib.TL2cgenDMatrixFree
        self._free_dmatrix.argtypes = [ctypes.c_void_p]
        for function in (self._create, self._predict, self._free_dmatrix):
            function.restype = ctypes.c_int
        self.libpath = libpath
        self._free: collections.deque[Any] = collections.deque()
        first = tl2cgen.Predictor(libpath, nthread=1)
        self._keep: list[Any] = [first]  # the Python objects own (and free) the handles
        self._free.append(first.handle)
        self._lock = threading.Lock()
        self.num_feature = int(first.num_feature)
        self.num_target = int(first.num_target)
        self.num_class = int(np.max(first.num_class))
        self.data_dtype = np.dtype(np.float32 if first.threshold_type == "float32" else np.float64)
        self.leaf_dtype = np.dtype(np.float32 if first.leaf_output_type == "float32" else np.float64)
        self.out_dtype = np.dtype(out_dtype) if out_dtype is not None else self.leaf_dtype
        self._data_type = first.threshold_type.encode()
        self._missing = np.array([np.nan], dtype=self.data_dtype)
        self._missing_address = self._missing.ctypes.data

    def _acquire(self) -> Any:
        try:
            return self._free.pop()
        except IndexError:
            import tl2cgen

            with self._lock:
                extra = tl2cgen.Predictor(self.libpath, nthread=1)
                self._keep.append(extra)
            return extra.handle

    def predict(self, data: np.ndarray, pred_margin: bool = False) -> np.ndarray:
        """Scores a 2-D array: (rows,) for one output per row, else (rows, outputs), as the framework does."""
        x = np.ascontiguousarray(data, dtype=self.data_dtype)
        if x.ndim != 2 or x.shape[1] != self.num_feature:
            raise ValueError(f"expected rows of {self.num_feature} features, got shape {list(x.shape)}")
        rows = x.shape[0]
        out = np.zeros((rows, self.num_target, self.num_class), dtype=self.leaf_dtype)
        if rows:
            dmat = ctypes.c_void_p()
            self._check(
                self._create(
                    x.ctypes.data, self._data_type, rows, x.shape[1], self._missing_address, ctypes.byref(dmat)
                )
            )
            handle = self._acquire()
            try:
                self._check(self._predict(handle, dmat, 0, 1 if pred_margin else 0, out.ctypes.data))
            finally:
                self._free.append(handle)
                self._check(self._free_dmatrix(dmat))
        out = out.reshape(rows, -1)
        if out.shape[1] == 1:
            out = out[:, 0]
        return out.astype(self.out_dtype, copy=False)


def probe_rows(num_feature: int, rows: int = 64, seed: int = 0) -> np.ndarray:
    """Rows that reach many leaves of most forests: several scales, zeros, and missing values."""
    rng = np.random.default_rng(seed)
    scales = np.array([1.0, 10.0, 1000.0, 0.1])[np.arange(rows) % 4][:, None]
    x = rng.normal(size=(rows, num_feature)) * scales
    x[0] = 0.0
    x[1] = np.nan
    x[2::7, rng.integers(0, num_feature)] = np.nan
    return x


def compile_booster(framework: str, booster: Any, libpath: str) -> None:
    """Compiles a booster to a shared library at ``libpath`` (seconds; blocking)."""
    import tl2cgen
    import treelite

    if framework == "xgboost":
        model = treelite.frontend.from_xgboost(booster)
    elif framework == "lightgbm":
        model = treelite.frontend.from_lightgbm(booster)
    else:
        raise ValueError(f"cannot compile {framework!r} models")
    jobs = max(1, min(8, os.cpu_count() or 1))
    # Large forests: several translation units, compiled in parallel.
    params = {"parallel_comp": jobs} if jobs > 1 and model.num_tree > 64 else {}
    tl2cgen.export_lib(model, toolchain="gcc", libpath=libpath, params=params, nthread=jobs)


@dataclass
class CompileResult:
    """What ``TreeCompiler.prepare`` did for one checkpoint."""

    compiled: CompiledTrees | None
    compiled_now: bool = False  # compiled here (False: reused the store's cached library)
    reason: str = ""  # why there is no compiled library, when there is none
    seconds: float = 0.0


class TreeCompiler:
    """Compiles boosters, caches the libraries in the store and loads cached ones after checking them.

    Args:
        local_dir: Private directory the verified libraries are loaded from (default: a
            new temporary directory, removed at exit).
        compile_fn: Compiles (framework, booster, libpath); tests inject failures.
    """

    def __init__(self, local_dir: str | None = None, compile_fn: Any = compile_booster) -> None:
        self._own_dir = local_dir is None
        self.local_dir = local_dir or tempfile.mkdtemp(prefix="trainwire-compiled-")
        os.makedirs(self.local_dir, mode=0o700, exist_ok=True)
        if self._own_dir:
            atexit.register(shutil.rmtree, self.local_dir, True)
        self.compile_fn = compile_fn
        # model sha256 -> compilations done / cached libraries reused / cached libraries refused.
        self.compilations: collections.Counter[str] = collections.Counter()
        self.reused: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()

    # --- keys -----------------------------------------------------------------
    @staticmethod
    def model_sha256(store: Store, directory: str, framework: str) -> str:
        """The model file's sha256: from the (verified) manifest, else hashed from the store."""
        # The main model file is what the cache key hashes.
        filename = frameworks.get_framework(framework).model_file
        for entry in read_manifest(store, directory) or []:
            if entry.path == filename:
                return entry.sha256
        return hashlib.sha256(store.read_bytes(f"{directory}/{filename}")).hexdigest()

    @staticmethod
    def record_path(directory: str, model_sha: str, tag: str) -> str:
        return f"{directory}/{COMPILED_DIR}/{model_sha}-{tag}.json"

    # --- the cache ------------------------------------------------------------
    def _local_copy(self, data: bytes, sha: str) -> str:
        """Writes verified library bytes into the private directory (named by their sha256)."""
        path = os.path.join(self.local_dir, f"{sha}.so")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=self.local_dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return path

    def _cached(self, store: Store, directory: str, record_path: str, model_sha: str) -> str | None:
        """The local path of the store's cached library once its bytes match its record, else None."""
        if not store.exists(record_path):
            return None
        try:
            record = store.read_json(record_path)
            name, want = str(record["library"]), str(record["sha256"]).lower()
            if "/" in name or not name.endswith(".so") or record.get("model_sha256") != model_sha:
                raise ValueError(f"bad record {record!r}")
            data = store.read_bytes(f"{directory}/{COMPILED_DIR}/{name}")
        except Exception as exc:  # noqa: BLE001 - a broken cache entry is compiled again
            logger.warning("compiled model cache %s unusable, compiling again: %s", store.uri_of(record_path), exc)
            self.refused[model_sha] += 1
            return None
        got = hashlib.sha256(data).hexdigest()
        if got != want or len(data) != int(record.get("size_bytes", len(data))):
            logger.error(
                "refusing compiled model %s: sha256 %s, its record says %s; compiling again",
                store.uri_of(f"{directory}/{COMPILED_DIR}/{name}"),
                got,
                want,
            )
            self.refused[model_sha] += 1
            return None
        return self._local_copy(data, got)

    def _compile(
        self, store: Store, directory: str, record_path: str, model_sha: str, framework: str, booster: Any, tag: str
    ) -> str:
        self.compilations[model_sha] += 1
        build_dir = tempfile.mkdtemp(prefix="build-", dir=self.local_dir)
        try:
            built = os.path.join(build_dir, "model.so")
            self.compile_fn(framework, booster, built)
            with open(built, "rb") as f:
                data = f.read()
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        sha = hashlib.sha256(data).hexdigest()
        local = self._local_copy(data, sha)
        name = f"{model_sha}-{tag}-{sha[:16]}.so"
        try:
            store.write_bytes(f"{directory}/{COMPILED_DIR}/{name}", data)
            # The record last: readers see no record or one naming complete bytes.
            store.write_json(
                record_path,
                {
                    "library": name,
                    "sha256": sha,
                    "size_bytes": len(data),
                    "model_sha256": model_sha,
                    "framework": framework,
                    "platform": tag,
                    "created_at": time.time(),
                },
            )
        except Exception as exc:  # noqa: BLE001 - a read-only store still serves the local library
            logger.warning("cannot cache the compiled model in %s: %s", store.uri_of(directory), exc)
        return local

    # --- the whole step -------------------------------------------------------
    def prepare(self, store: Store, directory: str, framework: str, predictor: Any) -> CompileResult:
        """A checked compiled library for a loaded predictor: the store's cached one, else compiled now (blocking).

        Never raises: whatever fails leaves the framework's predict serving (``reason`` says why).
        """
        started = time.monotonic()
        compiled_now = False
        try:
            tag = platform_tag()
            model_sha = self.model_sha256(store, directory, framework)
            record = self.record_path(directory, model_sha, tag)
            libpath = self._cached(store, directory, record, model_sha)
            if libpath is None:
                libpath = self._compile(store, directory, record, model_sha, framework, predictor.model, tag)
                compiled_now = True
            else:
                self.reused[model_sha] += 1
            probe = probe_rows(self._num_features(framework, predictor.model))
            expected = np.asarray(predictor.framework_predict(probe))
            compiled = CompiledTrees(libpath, out_dtype=expected.dtype)
            got = compiled.predict(probe)
            if got.shape != expected.shape:
                raise ValueError(f"compiled outputs have shape {got.shape}, the framework's {expected.shape}")
            diff = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
            if not diff <= TOLERANCE:
                raise ValueError(f"compiled outputs differ from the framework's by {diff:.3g} on probe rows")
        except Exception as exc:  # noqa: BLE001 - the framework's predict still serves
            logger.warning("not compiling the %s model in %s: %s", framework, store.uri_of(directory), exc)
            return CompileResult(None, compiled_now, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
        return CompileResult(compiled, compiled_now, "", time.monotonic() - started)

    @staticmethod
    def _num_features(framework: str, booster: Any) -> int:
        return int(booster.num_features() if framework == "xgboost" else booster.num_feature())
