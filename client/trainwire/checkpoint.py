"""``Checkpoint``: a directory of files in the shared store or on local disk."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.fs as pafs

from trainwire_core.manifest import COMPILED_DIR, is_derived_path, verify_checkpoint
from trainwire_core.storage import MANIFEST_NAME, Store, resolve

METADATA_NAME = ".metadata.json"
PREPROCESSOR_NAME = "preprocessor.pkl"
# The file ``Checkpoint.from_dict`` pickles the dict into, named as in Ray 2.4.
DICT_CHECKPOINT_NAME = "dict_checkpoint.pkl"
# The preprocessor's name in a checkpoint, as ``ray.air.constants.PREPROCESSOR_KEY``: its file
# (``os.path.join(checkpoint_dir, PREPROCESSOR_KEY)``, as Ray 2.4's examples open it) and its key in
# ``to_dict()``. ``from_dict`` also takes Ray 2.4's value, "_preprocessor".
PREPROCESSOR_KEY = PREPROCESSOR_NAME
_RAY24_PREPROCESSOR_KEY = "_preprocessor"
# Files a checkpoint carries for trainwire's own bookkeeping, not the user's data.
_BOOKKEEPING = {METADATA_NAME, MANIFEST_NAME, PREPROCESSOR_NAME, DICT_CHECKPOINT_NAME}


def _ignore_derived(root: str) -> Callable[[str, list[str]], list[str]]:
    """A ``shutil.copytree`` filter that leaves out the predictor's cache at the checkpoint's top level."""

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [COMPILED_DIR] if os.path.samefile(directory, root) and COMPILED_DIR in names else []

    return ignore


def _unwrap_parallel(value: Any) -> Any:
    """A model wrapped by ``prepare_model`` (DDP, FSDP) as its inner module, and its state dict
    without the ``module.`` prefix, as Ray 2.4's TorchCheckpoint stored them: the wrapper cannot
    be unpickled outside its process group."""
    torch = sys.modules.get("torch")
    if torch is None:
        return value
    if isinstance(value, torch.nn.Module) and hasattr(value, "module"):
        return value.module
    if isinstance(value, dict) and value and all(isinstance(k, str) and k.startswith("module.") for k in value):
        return {k[len("module.") :]: v for k, v in value.items()}
    return value


class Checkpoint:
    """A directory of files, as in ``ray.train.Checkpoint``.

    Args:
        path: A local directory, or a URI (``file://``, ``s3://``) of one.
        filesystem: The pyarrow filesystem of ``path``; resolved from it when None.
    """

    def __init__(self, path: str | os.PathLike, filesystem: pafs.FileSystem | None = None) -> None:
        path = os.fspath(path)
        if "://" in path:
            self.uri = path
        elif filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
            self.uri = "file://" + os.path.abspath(path)
        else:
            self.uri = f"{filesystem.type_name}://{path}"
        if filesystem is None:
            filesystem, path = resolve(path)
        self.filesystem = filesystem
        self.path = path
        # Set by whoever checked the files against the manifest already (the predictor).
        self._verified = False
        # Set on checkpoints a coordinator reported (a Result's): their URI lies in that coordinator's store.
        self._committed = False

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> Checkpoint:
        """A checkpoint of a local directory (its files are not copied)."""
        return cls(os.path.abspath(os.fspath(path)), pafs.LocalFileSystem())

    @classmethod
    def from_new_directory(cls, prefix: str, write: Callable[[str], None], preprocessor: Any = None) -> Checkpoint:
        """A checkpoint of a fresh local directory that ``write(path)`` fills, with an optional preprocessor."""
        path = tempfile.mkdtemp(prefix=f"trainwire-{prefix}-")
        write(path)
        ckpt = cls.from_directory(path)
        if preprocessor is not None:
            ckpt.set_preprocessor(preprocessor)
        return ckpt

    @classmethod
    def from_uri(cls, uri: str) -> Checkpoint:
        """A checkpoint of a directory in a store (``file://``, ``s3://``); nothing is copied."""
        return cls(uri)

    @classmethod
    def from_checkpoint(cls, other: Checkpoint) -> Checkpoint:
        """The same files seen as this class, e.g. ``TorchCheckpoint.from_checkpoint(result.checkpoint)``."""
        ckpt = cls(other.path, other.filesystem)
        ckpt._committed = other._committed
        return ckpt

    @classmethod
    def _of_run(cls, uri: str) -> Checkpoint:
        """A checkpoint a coordinator committed and reported at ``uri``."""
        ckpt = cls(uri)
        ckpt._committed = True
        return ckpt

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """A checkpoint holding a dict, as Ray 2.4's ``Checkpoint.from_dict``.

        The dict is pickled (cloudpickle) into ``dict_checkpoint.pkl`` of a new local directory, so
        it travels as any directory checkpoint does (``train.report`` uploads it). A preprocessor
        under ``PREPROCESSOR_KEY`` is saved as the checkpoint's preprocessor, where predictors read it.
        """
        import cloudpickle

        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict takes a dict, got {type(data).__name__}")
        data = {key: _unwrap_parallel(value) for key, value in data.items()}
        preprocessor = data.pop(PREPROCESSOR_KEY, data.pop(_RAY24_PREPROCESSOR_KEY, None))

        def write(path: str) -> None:
            with open(os.path.join(path, DICT_CHECKPOINT_NAME), "wb") as f:
                cloudpickle.dump(data, f)

        return cls.from_new_directory("dict", write, preprocessor)

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint as a dict, as Ray 2.4's ``Checkpoint.to_dict``.

        A checkpoint made by ``from_dict`` gives its dict back. Any other gives its files'
        contents as ``{relative path: bytes}``. Either way a saved preprocessor is under
        ``PREPROCESSOR_KEY``.

        Raises:
            DataLossError: A file does not match the checkpoint's manifest.
        """
        import cloudpickle

        with self.as_directory() as d:
            dict_file = os.path.join(d, DICT_CHECKPOINT_NAME)
            if os.path.exists(dict_file):
                with open(dict_file, "rb") as f:
                    data = dict(cloudpickle.load(f))
            else:
                data = {}
                for root, dirs, files in os.walk(d):
                    if root == d and COMPILED_DIR in dirs:
                        dirs.remove(COMPILED_DIR)  # the predictor's cache, not the checkpoint
                    for name in files:
                        rel = os.path.relpath(os.path.join(root, name), d).replace(os.sep, "/")
                        if rel not in _BOOKKEEPING:
                            with open(os.path.join(root, name), "rb") as f:
                                data[rel] = f.read()
            preprocessor_file = os.path.join(d, PREPROCESSOR_NAME)
            if os.path.exists(preprocessor_file):
                with open(preprocessor_file, "rb") as f:
                    data[PREPROCESSOR_KEY] = cloudpickle.load(f)
        return data

    def to_uri(self, uri: str) -> str:
        """Copies the checkpoint's files to ``uri`` (``file://``, ``s3://`` or a path) and returns ``uri``.

        Raises:
            DataLossError: A file does not match the checkpoint's manifest.
        """
        fs, path = resolve(uri)
        store = Store.for_filesystem(fs, path)
        with self.as_directory() as d:
            if not os.path.isdir(os.path.join(d, COMPILED_DIR)):
                store.upload_dir(d, path)
                return uri
            # Libraries the predictor compiled are its cache: leave them behind, as to_directory does.
            with tempfile.TemporaryDirectory(prefix="trainwire-to-uri-") as staging:
                shutil.copytree(d, staging, dirs_exist_ok=True, ignore=_ignore_derived(d))
                store.upload_dir(staging, path)
        return uri

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """The checkpoint ``to_bytes`` gave (a pickled dict), as in Ray 2.4."""
        import cloudpickle

        return cls.from_dict(cloudpickle.loads(data))

    def to_bytes(self) -> bytes:
        """``to_dict()`` pickled, as in Ray 2.4."""
        import cloudpickle

        return cloudpickle.dumps(self.to_dict())

    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    @property
    def _store(self) -> Store:
        return Store.for_filesystem(self.filesystem, self.path)

    def _verify_local(self, directory: str) -> None:
        """Checks a local copy of the files against the manifest, if the checkpoint has one."""
        # A directory without a manifest (one the loop just wrote) has nothing to be checked against.
        if not self._verified and os.path.exists(os.path.join(directory, MANIFEST_NAME)):
            store = Store.for_filesystem(pafs.LocalFileSystem(), os.path.abspath(directory))
            verify_checkpoint(store, store.root, label=self.uri)

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copies the checkpoint's files into a local directory and returns its path.

        Raises:
            DataLossError: A file does not match the checkpoint's manifest (size
                or sha256); the message names the file.
        """
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="trainwire-checkpoint-")
        if self.is_local and os.path.abspath(target) == os.path.abspath(self.path):
            self._verify_local(target)
            return target
        try:
            # Libraries the predictor compiled from the model are its cache, not the checkpoint.
            if self.is_local:
                shutil.copytree(self.path, target, dirs_exist_ok=True, ignore=_ignore_derived(self.path))
            else:
                self._store.download_dir(self.path, target, skip=is_derived_path)
            self._verify_local(target)
        except BaseException:
            if path is None:
                shutil.rmtree(target, ignore_errors=True)
            raise
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yields a local directory with the files (the checkpoint's own when local).

        Raises:
            DataLossError: A file does not match the checkpoint's manifest.
        """
        if self.is_local:
            self._verify_local(self.path)
            yield self.path
            return
        tmp = self.to_directory()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def get_metadata(self) -> dict[str, Any]:
        store = self._store
        meta_path = f"{self.path}/{METADATA_NAME}"
        if not store.exists(meta_path):
            return {}
        return json.loads(store.read_bytes(meta_path))

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        self._store.write_json(f"{self.path}/{METADATA_NAME}", metadata)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def get_preprocessor(self) -> Any:
        """The fitted preprocessor saved with the checkpoint, or None."""
        import cloudpickle

        store = self._store
        path = f"{self.path}/{PREPROCESSOR_NAME}"
        return cloudpickle.loads(store.read_bytes(path)) if store.exists(path) else None

    def set_preprocessor(self, preprocessor: Any) -> None:
        import cloudpickle

        self._store.write_bytes(f"{self.path}/{PREPROCESSOR_NAME}", cloudpickle.dumps(preprocessor))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(uri={self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.filesystem))
