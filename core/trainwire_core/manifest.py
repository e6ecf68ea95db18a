"""Checks a checkpoint's files against its manifest (each file's size and sha256).

The coordinator writes ``manifest.json`` last when it commits a checkpoint; the
client (``Checkpoint.to_directory``/``as_directory``) and the predictor check
the files against it here before anything reads them.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow.fs as pafs

from trainwire_core.errors import DataLossError
from trainwire_core.storage import MANIFEST_NAME, ManifestEntry, Store, is_relative_path

_CHUNK = 1 << 20
# Where the predictor caches what it derives from a checkpoint (compiled tree models). Not part of
# the checkpoint: never listed in a manifest, never checked against one, rewritten at will.
COMPILED_DIR = ".compiled"


def is_derived_path(path: str) -> bool:
    """Whether a path inside a checkpoint is the predictor's cache, not a checkpoint file."""
    return path == COMPILED_DIR or path.startswith(COMPILED_DIR + "/")


def read_manifest(store: Store, directory: str, label: str = "") -> list[ManifestEntry] | None:
    """The files a checkpoint's manifest lists, or None when it has no manifest.

    Raises:
        DataLossError: The manifest exists but cannot be read as one.
    """
    label = label or store.uri_of(directory)
    path = f"{directory}/{MANIFEST_NAME}"
    if not store.exists(path):
        return None
    try:
        files = json.loads(store.read_bytes(path))["files"]
        entries = [ManifestEntry(str(f["path"]), int(f["size_bytes"]), str(f["sha256"]).lower()) for f in files]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataLossError(f"checkpoint {label}: file {MANIFEST_NAME!r} is not a valid manifest: {exc}") from exc
    for entry in entries:
        # The manifest names files inside the checkpoint only.
        if not is_relative_path(entry.path):
            raise DataLossError(f"checkpoint {label}: file {MANIFEST_NAME!r} lists a bad path {entry.path!r}")
    return entries


# The manifest's key that says who wrote the checkpoint's files: True when trainwire's own code or a
# caller holding submit-code did, so its pickled files may be loaded; False for an upload without it.
CODE_TRUSTED_KEY = "code_trusted"


def is_code_trusted(store: Store, directory: str) -> bool:
    """Whether a committed checkpoint's pickled files may be loaded (its manifest vouches for them).

    A checkpoint without a manifest, or whose manifest predates the mark, is not trusted.

    Raises:
        DataLossError: The manifest exists but is not JSON.
    """
    path = f"{directory}/{MANIFEST_NAME}"
    if not store.exists(path):
        return False
    try:
        manifest = json.loads(store.read_bytes(path))
    except ValueError as exc:
        raise DataLossError(f"checkpoint {store.uri_of(directory)}: file {MANIFEST_NAME!r} is not JSON") from exc
    return isinstance(manifest, dict) and manifest.get(CODE_TRUSTED_KEY) is True


def _sha256(fs: pafs.FileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checkpoint(store: Store, directory: str, label: str = "") -> int:
    """Checks every file the manifest lists (size, then sha256); returns how many were checked.

    A checkpoint without a manifest (one a user made locally) passes: there is
    nothing to check it against. Files the manifest does not list are ignored, and so is
    the predictor's cache (``.compiled/``), even where a manifest names it.

    Args:
        store: The store (or local filesystem) holding the checkpoint.
        directory: The checkpoint's directory in ``store``.
        label: How messages name the checkpoint; its URI when empty.

    Raises:
        DataLossError: A listed file is missing, has another size or another
            sha256; the message names the file.
    """
    label = label or store.uri_of(directory)
    entries = read_manifest(store, directory, label)
    if entries is None:
        return 0
    entries = [e for e in entries if not is_derived_path(e.path)]
    for entry in entries:
        path = f"{directory}/{entry.path}"
        info = store.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise DataLossError(f"checkpoint {label}: file {entry.path!r} is listed in its manifest but missing")
        if info.size != entry.size_bytes:
            raise DataLossError(
                f"checkpoint {label}: file {entry.path!r} has {info.size} bytes; its manifest says {entry.size_bytes}"
            )
        got = _sha256(store.fs, path)
        if got != entry.sha256:
            raise DataLossError(
                f"checkpoint {label}: file {entry.path!r} has sha256 {got}; its manifest says {entry.sha256}"
            )
    return len(entries)
