"""Dataset uploads (content-addressed, stored once) and resolving a Fit's dataset references."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from trainwire_coordinator.admission.uploads import SHA256 as _SHA256
from trainwire_coordinator.admission.uploads import read_hashed_upload
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.datasets import guess_format, open_dataset
from trainwire_core.errors import InvalidArgumentError, NotFoundError
from trainwire_core.storage import Store, resolve
from trainwire_core.v1 import coordinator_pb2

DATA_FILE = "data.parquet"
META_FILE = "meta.json"


class DatasetService:
    """Stores uploaded Arrow data as parquet under ``datasets/<sha256>/``.

    Args:
        store: The shared store.
        max_upload_bytes: Largest upload accepted.
    """

    def __init__(self, store: Store, max_upload_bytes: int = 8 << 30) -> None:
        self.store = store
        self.max_upload_bytes = max_upload_bytes

    def _info(self, sha256: str) -> coordinator_pb2.DatasetInfo:
        meta = self.store.read_json(f"{self.store.dataset_dir(sha256)}/{META_FILE}")
        return coordinator_pb2.DatasetInfo(
            sha256=sha256,
            ref=coordinator_pb2.DatasetRef(uri=f"datasets/{sha256}", format="parquet"),
            num_rows=meta["num_rows"],
            columns=meta["columns"],
            size_bytes=meta["size_bytes"],
        )

    def get(self, sha256: str) -> coordinator_pb2.DatasetInfo:
        if not _SHA256.match(sha256):
            raise InvalidArgumentError("sha256 must be 64 lowercase hex digits", field="sha256")
        if not self.store.exists(f"{self.store.dataset_dir(sha256)}/{META_FILE}"):
            raise NotFoundError(f"no dataset with sha256 {sha256}")
        return self._info(sha256)

    async def upload(
        self, requests: AsyncIterator[coordinator_pb2.UploadDatasetRequest]
    ) -> coordinator_pb2.DatasetInfo:
        """Receives header + chunks; stores nothing unless size and hash match."""
        header, data = await read_hashed_upload(requests, self.max_upload_bytes)
        if self.store.exists(f"{self.store.dataset_dir(header.sha256)}/{META_FILE}"):
            return self._info(header.sha256)  # content-addressed: stored once
        try:
            table = ipc.open_stream(pa.BufferReader(data)).read_all()
        except (pa.ArrowException, OSError, ValueError) as exc:  # pyarrow raises OSError for a bad stream
            raise InvalidArgumentError(f"upload is not an Arrow IPC stream: {exc}", field="chunk") from exc
        directory = self.store.dataset_dir(header.sha256)
        sink = io.BytesIO()
        pq.write_table(table, sink)
        self.store.write_bytes(f"{directory}/{DATA_FILE}", sink.getvalue())
        # meta.json last: its presence means the dataset is complete.
        self.store.write_json(
            f"{directory}/{META_FILE}",
            {"num_rows": table.num_rows, "columns": table.column_names, "size_bytes": header.size_bytes},
        )
        return self._info(header.sha256)

    def resolve(self, name: str, ref: coordinator_pb2.DatasetRef) -> DatasetSchema:
        """The full URI, format and columns behind a dataset reference."""
        field = f"datasets[{name}].uri"
        if not ref.uri:
            raise InvalidArgumentError(f"dataset {name!r} has no uri", field=field)
        if ref.uri.startswith("datasets/"):
            sha = ref.uri.split("/", 1)[1].strip("/")
            if not _SHA256.match(sha) or not self.store.exists(f"{self.store.dataset_dir(sha)}/{META_FILE}"):
                raise InvalidArgumentError(f"dataset {name!r}: no uploaded dataset {ref.uri!r}", field=field)
            info = self._info(sha)
            uri = self.store.uri_of(f"{self.store.dataset_dir(sha)}/{DATA_FILE}")
            return DatasetSchema(uri=uri, format="parquet", columns=tuple(info.columns))
        fmt = guess_format(ref.uri, ref.format)
        if fmt not in ("parquet", "csv"):
            raise InvalidArgumentError(
                f"dataset format must be parquet or csv, got {fmt!r}", field=f"datasets[{name}].format"
            )
        try:
            fs, path = resolve(ref.uri)
            root = not path.strip("/") if isinstance(fs, pafs.LocalFileSystem) else "/" not in path.strip("/")
            if root:
                # Reading a dataset lists its directory tree: "/" or a whole bucket would take the coordinator.
                raise InvalidArgumentError(f"dataset {name!r}: {ref.uri!r} is a filesystem or bucket root", field=field)
            schema = open_dataset(ref.uri, fmt).schema
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(exc.message, field=field) from exc
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise InvalidArgumentError(f"dataset {name!r}: cannot read {ref.uri!r}: {exc}", field=field) from exc
        return DatasetSchema(uri=ref.uri, format=fmt, columns=tuple(schema.names))
