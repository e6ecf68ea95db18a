"""``Checkpoint``: a directory of files in the shared store or on local disk."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.fs as pafs

from trainwire_core.manifest import COMPILED_DIR, is_derived_path, verify_checkpoint
from trainwire_core.storage import Store, resolve

METADATA_NAME = ".metadata.json"
PREPROCESSOR_NAME = "preprocessor.pkl"


def _ignore_derived(root: str) -> Callable[[str, list[str]], list[str]]:
    """A ``shutil.copytree`` filter that leaves out the predictor's cache at the checkpoint's top level."""

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [COMPILED_DIR] if os.path.samefile(directory, root) and COMPILED_DIR in names else []

    return ignore


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
        return cls(uri)

    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    @property
    def _store(self) -> Store:
        return Store.for_filesystem(self.filesystem, self.path)

    def _verify_local(self, directory: str) -> None:
        """Checks a local copy of the files against the manifest, if the checkpoint has one."""
        if not self._verified:
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
