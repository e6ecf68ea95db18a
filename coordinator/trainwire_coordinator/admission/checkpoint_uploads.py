"""UploadCheckpoint: a client's local checkpoint becomes a committed checkpoint of a new run."""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format

from trainwire.config import CheckpointConfig, check_structs
from trainwire_coordinator.admission.uploads import read_upload
from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.manifest import is_derived_path
from trainwire_core.storage import MANIFEST_NAME, ManifestEntry, Store, is_relative_path
from trainwire_core.v1 import coordinator_pb2

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
UPLOADED_CHECKPOINT_ID = "checkpoint_000001"


def _check_header(header: coordinator_pb2.UploadCheckpointHeader) -> dict[str, Any]:
    if not header.run_name or "/" in header.run_name or len(header.run_name) > 200:
        raise InvalidArgumentError("header.run_name must be 1-200 characters without '/'", field="header.run_name")
    check_structs(header, "header.")
    if not header.files:
        raise InvalidArgumentError("header.files must list the checkpoint's files", field="header.files")
    expected = {}
    for i, f in enumerate(header.files):
        if not is_relative_path(f.path):
            raise InvalidArgumentError(
                f"file path {f.path!r} must be a plain relative path (no '..', '.', empty or absolute parts, "
                "NUL or backslash; parts of at most 255 bytes)",
                field=f"header.files[{i}].path",
            )
        if f.path == MANIFEST_NAME or is_derived_path(f.path):
            raise InvalidArgumentError(
                f"{f.path!r} is written by trainwire itself (the manifest, the predictor's compiled models); "
                "leave it out of an upload",
                field=f"header.files[{i}].path",
            )
        if f.size_bytes < 0 or not _SHA256.match(f.sha256):
            raise InvalidArgumentError(
                f"file {f.path!r} needs size_bytes >= 0 and a sha256 of 64 hex digits", field=f"header.files[{i}]"
            )
        if f.path in expected:
            raise InvalidArgumentError(f"file {f.path!r} is listed twice", field=f"header.files[{i}].path")
        expected[f.path] = f
    # A path cannot be both a file and the directory of another file.
    directories = {p.rsplit("/", n)[0] for p in expected for n in range(1, p.count("/") + 1)}
    for i, f in enumerate(header.files):
        if f.path in directories:
            raise InvalidArgumentError(
                f"file {f.path!r} is also listed as a directory of other files", field=f"header.files[{i}].path"
            )
    return expected


async def receive_checkpoint(
    store: Store,
    run_id: str,
    requests: AsyncIterator[coordinator_pb2.UploadCheckpointRequest],
    code_trusted: bool = False,
) -> tuple[coordinator_pb2.UploadCheckpointHeader, CheckpointManager]:
    """Writes the uploaded files and commits them; nothing stays behind on bad input.

    ``code_trusted`` (the uploader holds submit-code) lets the predictor load the upload's pickles.
    """
    expected: dict[str, Any] = {}
    received: dict[str, tuple[int, Any]] = {}  # path -> (bytes so far, sha256 state)
    directory = store.checkpoint_dir(run_id, UPLOADED_CHECKPOINT_ID)
    current: tuple[str, Any] | None = None

    def check_header(first: coordinator_pb2.UploadCheckpointHeader) -> None:
        expected.update(_check_header(first))

    def take_chunk(chunk: coordinator_pb2.FileChunk) -> None:
        nonlocal current
        if chunk.path not in expected:
            raise InvalidArgumentError(f"chunk for {chunk.path!r}, which the header does not list", field="chunk.path")
        size, digest = received.get(chunk.path, (0, hashlib.sha256()))
        if chunk.offset != size:
            raise InvalidArgumentError(
                f"chunk of {chunk.path!r} at offset {chunk.offset}, expected {size}", field="chunk.offset"
            )
        if size + len(chunk.data) > expected[chunk.path].size_bytes:
            raise InvalidArgumentError(
                f"file {chunk.path!r} is longer than its size_bytes={expected[chunk.path].size_bytes}; "
                "nothing was stored",
                field="chunk.data",
            )
        if current is None or current[0] != chunk.path:
            if current is not None:
                current[1].close()
            target = f"{directory}/{chunk.path}"
            store.fs.create_dir(posixpath.dirname(target), recursive=True)
            current = (
                chunk.path,
                store.fs.open_append_stream(target) if size else store.fs.open_output_stream(target),
            )
        current[1].write(chunk.data)
        digest.update(chunk.data)
        received[chunk.path] = (size + len(chunk.data), digest)

    try:
        header = await read_upload(requests, check_header, take_chunk)
        if current is not None:
            current[1].close()
            current = None
        for path, f in expected.items():
            size, digest = received.get(path, (0, hashlib.sha256()))
            if size != f.size_bytes or digest.hexdigest() != f.sha256:
                raise InvalidArgumentError(
                    f"file {path!r}: got {size} of {f.size_bytes} bytes or a different sha256; nothing was stored",
                    field="chunk",
                )
            if size == 0:
                store.write_bytes(f"{directory}/{path}", b"")
        manager = CheckpointManager(
            store, run_id, header.run_name, CheckpointConfig(), framework="upload", code_trusted=code_trusted
        )
        manager.commit(
            UPLOADED_CHECKPOINT_ID,
            1,
            json_format.MessageToDict(header.metrics),
            [ManifestEntry(f.path, f.size_bytes, f.sha256) for f in expected.values()],
        )
        return header, manager
    except BaseException:
        if current is not None:
            current[1].close()
        store.delete_dir(store.run_dir(run_id))
        raise
