"""Access to the shared store (a local directory or S3) and its layout.

Layout under the store's root::

    runs/<run_id>/checkpoints/<checkpoint_id>/...   checkpoint files + manifest.json
    runs/<run_id>/checkpoints.json                  the committed index (atomic)
    runs/<run_id>/logs/rank-<r>/attempt-<a>/        a rank's output: <seq>.jsonl chunks, then done
    names/<run name>.json                           newest run id of that name
    datasets/<sha256>/data.parquet                  uploads, content-addressed
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow.fs as pafs

from trainwire_core.errors import DataLossError, InvalidArgumentError, NotFoundError

MANIFEST_NAME = "manifest.json"
INDEX_NAME = "checkpoints.json"
# A model's aliases and traffic policy, beside its index (written by the coordinator's ModelRegistry).
ALIASES_NAME = "aliases.json"
# Rank 0's pickled train_loop_per_worker return value, in the run's directory; the SDK reads it.
RETURN_VALUE_NAME, RETURN_VALUE_MAX_BYTES = "return_value.pkl", 16 << 20
# What a run id may look like when a model name is taken as one: a plain path component only.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# Ranks other than 0 upload a checkpoint under this prefix; the commit merges their files in.
RANK_STAGING_PREFIX = ".rank-staging-"
_CHUNK = 1 << 20

# Workers' output: each rank and attempt writes numbered chunks of JSON lines, each chunk written
# whole, and a ``done`` file when its output has ended. A chunk is never changed once written, so
# a reader that remembers the chunk and line it got to resumes exactly there, on any coordinator.
LOGS_DIR = "logs"
LOG_DONE_NAME = "done"
LOG_CHUNK_NAME = re.compile(r"^(\d{8})\.jsonl$")
_LOG_RANK_DIR = re.compile(r"^rank-(\d{1,6})$")
_LOG_ATTEMPT_DIR = re.compile(r"^attempt-(\d{1,6})$")
# A longer line is split: a reader never holds more than this per line.
MAX_LOG_LINE_CHARS = 64 * 1024

# A plain path component: no separators, no "." or "..", nothing a filesystem treats specially.
_COMPONENT = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}$")
_MAX_RELATIVE_PATH = 1024
_SCHEMES = ("file", "s3")
_MAX_NAME_BYTES = 255  # the longest file name local filesystems take


def is_path_component(value: str) -> bool:
    """True when ``value`` (from the network) can name one store entry and nothing else."""
    return bool(_COMPONENT.match(value))


def is_relative_path(value: str) -> bool:
    """True when ``value`` names a file below a directory: no "..", no absolute or empty parts."""
    parts = value.split("/")
    return (
        0 < len(value) <= _MAX_RELATIVE_PATH
        and all(p and p not in (".", "..") and p.isprintable() and len(p.encode()) <= _MAX_NAME_BYTES for p in parts)
        and not any(c in value for c in "\\\x00")
    )


def relative_to(path: str, src: str) -> str:
    """``path``, listed by a filesystem under the directory ``src``, relative to ``src``.

    Filesystems differ on a leading "/" (local paths have one, object-store keys do not), so
    both sides are compared without it.

    Raises:
        DataLossError: ``path`` is not below ``src``, or not a plain relative path below it.
    """
    base = src.strip("/")
    base = posixpath.normpath(base) if base else ""
    listed = path.lstrip("/")
    if not base:
        rel = listed
    elif listed.startswith(base + "/"):
        rel = listed[len(base) + 1 :]
    else:
        rel = ""
    if not is_relative_path(rel):
        raise DataLossError(f"{path!r} is not a plain relative path below {src!r}; refusing to copy it")
    return rel


def log_chunk_name(seq: int) -> str:
    """The file name of chunk ``seq`` of a log stream."""
    return f"{seq:08d}.jsonl"


def log_stream_dir(run_dir: str, rank: int, attempt: int) -> str:
    """Where one rank's output of one attempt is written, in the run's directory."""
    return f"{run_dir}/{LOGS_DIR}/rank-{rank}/attempt-{attempt}"


def parse_log_rank_dir(name: str) -> int | None:
    """The rank a ``rank-<r>`` directory of the logs holds, or None for another name."""
    m = _LOG_RANK_DIR.match(name)
    return int(m.group(1)) if m else None


def parse_log_attempt_dir(name: str) -> int | None:
    """The attempt an ``attempt-<a>`` directory of a rank's logs holds, or None for another name."""
    m = _LOG_ATTEMPT_DIR.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a checkpoint: its path relative to the checkpoint, size and hash."""

    path: str
    size_bytes: int
    sha256: str


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """Returns the pyarrow filesystem and path for a store URI or local path."""
    if not uri:
        raise InvalidArgumentError("a storage URI is required", field="storage_path")
    if not uri.isprintable():
        raise InvalidArgumentError(f"storage URI {uri!r} has NUL or other unprintable characters", field="storage_path")
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))
    scheme = uri.split("://", 1)[0].lower()
    if scheme not in _SCHEMES:
        # Other pyarrow filesystems (gs, hdfs, ...) reach out to hosts as they open: not from a caller's URI.
        raise InvalidArgumentError(
            f"unsupported storage URI scheme {scheme!r} in {uri!r}: use {', '.join(s + '://' for s in _SCHEMES)} "
            "or a path",
            field="storage_path",
        )
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid and friends
        raise InvalidArgumentError(f"cannot open storage URI {uri!r}: {exc}", field="storage_path") from exc
    return fs, path


class Store:
    """The shared store rooted at a URI (``file://``, ``s3://`` or a path)."""

    def __init__(self, uri: str) -> None:
        self.fs, self.root = resolve(uri)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self.uri = "file://" + self.root if self.is_local else uri.split("?")[0].rstrip("/")
        # Query options (e.g. an S3 endpoint_override) must travel with every URI.
        self._query = "" if self.is_local or "?" not in uri else "?" + uri.split("?", 1)[1]
        if self.is_local:
            os.makedirs(self.root, exist_ok=True)

    @classmethod
    def for_filesystem(cls, fs: pafs.FileSystem, root: str) -> Store:
        """A Store over an already opened filesystem (e.g. a Checkpoint's)."""
        store = cls.__new__(cls)
        store.fs, store.root = fs, root
        store.is_local = isinstance(fs, pafs.LocalFileSystem)
        store.uri = ("file://" if store.is_local else "") + root
        store._query = ""
        return store

    # --- layout -----------------------------------------------------------
    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def uri_of(self, path: str) -> str:
        """The full URI of a path inside this store (readable with ``resolve``)."""
        rel = posixpath.relpath(path, self.root)
        return (self.uri if rel == "." else f"{self.uri}/{rel}") + self._query

    def run_dir(self, run_id: str) -> str:
        return self.path("runs", run_id)

    def checkpoint_dir(self, run_id: str, checkpoint_id: str) -> str:
        return self.path("runs", run_id, "checkpoints", checkpoint_id)

    @staticmethod
    def rank_staging_dir(checkpoint_dir: str, world_rank: int) -> str:
        """Where a rank other than 0 uploads its part of a checkpoint before the commit."""
        return posixpath.join(checkpoint_dir, f"{RANK_STAGING_PREFIX}{world_rank}")

    def move(self, src: str, dest: str) -> None:
        """Moves one file within the store (a rename locally, a copy and delete on S3)."""
        self.fs.create_dir(posixpath.dirname(dest), recursive=True)
        self.fs.move(src, dest)

    def index_path(self, run_id: str) -> str:
        return self.path("runs", run_id, INDEX_NAME)

    def aliases_path(self, run_id: str) -> str:
        return self.path("runs", run_id, ALIASES_NAME)

    def name_path(self, name: str) -> str:
        quoted = quote(name, safe="")
        if len(quoted) > 200:
            # Quoting can triple a name's length; file names stop at 255 bytes.
            quoted = "sha256-" + hashlib.sha256(name.encode()).hexdigest()
        return self.path("names", quoted + ".json")

    def dataset_dir(self, sha256: str) -> str:
        return self.path("datasets", sha256)

    # --- files ------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def read_bytes(self, path: str) -> bytes:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except FileNotFoundError as exc:
            raise NotFoundError(f"{self.uri_of(path)} does not exist") from exc

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_bytes(path))

    def write_bytes(self, path: str, data: bytes) -> None:
        """Writes a file so that readers see the old or the new content, never a part."""
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        if not self.is_local:
            # An object store's PUT is atomic already.
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            return
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def write_json(self, path: str, obj: Any) -> None:
        self.write_bytes(path, json.dumps(obj, indent=1, sort_keys=True).encode())

    def delete_dir(self, path: str) -> None:
        if self.exists(path):
            self.fs.delete_dir(path)

    def list_dir(self, path: str) -> list[str]:
        """Names of the entries directly in a directory ([] if it is missing)."""
        if not self.exists(path):
            return []
        return [posixpath.basename(i.path) for i in self.fs.get_file_info(pafs.FileSelector(path))]

    def upload_dir(self, local_dir: str | os.PathLike, dest: str) -> list[ManifestEntry]:
        """Copies a local directory into the store, hashing as it goes."""
        entries = []
        local_dir = Path(local_dir)
        for src in sorted(p for p in local_dir.rglob("*") if p.is_file()):
            rel = src.relative_to(local_dir).as_posix()
            target = posixpath.join(dest, rel)
            self.fs.create_dir(posixpath.dirname(target), recursive=True)
            digest = hashlib.sha256()
            size = 0
            with open(src, "rb") as fin, self.fs.open_output_stream(target) as fout:
                while chunk := fin.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    fout.write(chunk)
            entries.append(ManifestEntry(rel, size, digest.hexdigest()))
        return entries

    @staticmethod
    def hash_file(path: str | os.PathLike) -> tuple[int, str]:
        """(size, sha256 hex) of a local file."""
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return size, digest.hexdigest()

    def download_dir(self, src: str, local_dir: str | os.PathLike, skip: Callable[[str], bool] | None = None) -> None:
        """Copies a directory of the store into a local directory, less the relative paths ``skip`` names."""
        infos = self.fs.get_file_info(pafs.FileSelector(src, recursive=True, allow_not_found=True))
        if not infos and not self.exists(src):
            raise NotFoundError(f"{self.uri_of(src)} does not exist")
        os.makedirs(local_dir, exist_ok=True)
        files = [(relative_to(info.path, src), info) for info in infos if info.type == pafs.FileType.File]
        for rel, info in files:
            if skip is not None and skip(rel):
                continue
            target = Path(local_dir, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with self.fs.open_input_stream(info.path) as fin, open(target, "wb") as fout:
                while chunk := fin.read(_CHUNK):
                    fout.write(chunk)

    def walk_files(self, src: str) -> list[tuple[str, int]]:
        """(path relative to src, size) of every file under a directory."""
        infos = self.fs.get_file_info(pafs.FileSelector(src, recursive=True, allow_not_found=True))
        return sorted((relative_to(i.path, src), i.size) for i in infos if i.type == pafs.FileType.File)
