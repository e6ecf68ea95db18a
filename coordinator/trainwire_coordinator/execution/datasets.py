"""A run's datasets on its workers: the preprocessor fit and the shards, beside the run's reservation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads

from trainwire.data_config import LIMIT_FIELDS, datasets_to_split
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.datasets import ShardSpec, guess_format, open_dataset
from trainwire_core.storage import resolve

T = TypeVar("T")


def split_beside_reservation(
    ds: DatasetSchema,
    world_size: int,
    preprocessor: Any,
    placement_group: Any,
    split: bool = True,
    materialize_below_bytes: int = 0,
    ingest: Any = None,
    locality_hints: list[str] | None = None,
) -> list[Any]:
    """Each worker's view of a dataset, read and transformed by tasks that fit beside the run's reservation.

    Split: one Ray Data iterator per worker over its share of the rows. Not split: the whole
    dataset for every worker (each reads all of it), as Ray Train gives datasets it does not split.

    The run's placement group may hold every CPU of the cluster (``num_workers=os.cpu_count()``), and
    Ray Data's tasks ask for a CPU each by default: they would wait for ever while the workers wait for
    their rows. As the workers block on their iterators while those tasks run, the tasks borrow the
    workers' reserved CPUs: they ask for none, run only on the nodes of the run's placement group
    (a label selector on every task of the dataset) and at most ``world_size`` run at once.

    A dataset whose files take at most ``materialize_below_bytes`` is read (and transformed) once,
    here, and its blocks kept in Ray's object store: every epoch then iterates blocks in memory, where
    a streaming split would read and transform the files again each epoch.

    ``ingest`` (an ``IngestOptions``: the DataConfig's execution options for this dataset) sets the
    order and the resource limits; ``locality_hints`` (each rank's node id) go to the
    streaming split, as Ray Train's DataConfig passes them with ``enable_shard_locality``.
    """
    import copy

    import ray.data
    from ray.util import placement_group_table

    data = ray.data.read_datasource(
        files_datasource(ds.uri, ds.format), num_cpus=0, compute=ray.data.TaskPoolStrategy(size=world_size)
    )
    if preprocessor is not None:
        data = preprocessor.transform(data, num_cpus=0, concurrency=world_size)
    nodes = sorted(set(placement_group_table(placement_group)["bundles_to_node_id"].values()))
    if nodes or ingest is not None:  # a ready placement group has them all
        data = data.copy(data)  # its own DataContext, as Ray Train's DataConfig does
        options = copy.deepcopy(data.context.execution_options)
        if nodes:
            options.label_selector = {**(options.label_selector or {}), "ray.io/node-id": f"in({','.join(nodes)})"}
        if ingest is not None:
            apply_ingest_options(options, ingest)
        data.context.execution_options = options
    if materialize_below_bytes and files_size(ds.uri, ds.format) <= materialize_below_bytes:
        data = data.materialize()
        # Each rank iterates its own blocks locally (as Ray 2.4's split did): no per-epoch coordination.
        return split_materialized(data, world_size) if split else [data] * world_size
    if not split:
        return [data] * world_size
    hints = locality_hints if locality_hints and len(locality_hints) == world_size else None
    return data.streaming_split(world_size, equal=True, locality_hints=hints)


def apply_ingest_options(options: Any, ingest: Any) -> None:
    """Sets a Ray Data ExecutionOptions from a run's IngestOptions (the order and the resource limits)."""
    from ray.data import ExecutionResources

    options.preserve_order = ingest.preserve_order
    limits = {attr: getattr(ingest, name) for attr, name in LIMIT_FIELDS if ingest.HasField(name)}
    if limits:
        options.resource_limits = ExecutionResources(**limits)


def split_materialized(data: Any, world_size: int) -> list[Any]:
    """``data.split(world_size, equal=True)`` with no task that asks for a CPU.

    Ray Data's own split runs a task per block it cuts, each asking for a CPU: with the run's
    placement group holding every CPU it would wait for ever. The blocks are small (the dataset
    is below the materialising threshold), so they are cut here, and each rank's rows become a
    dataset of their own through a read task that asks for none.
    """
    import ray
    import ray.data
    from ray.data.block import BlockAccessor

    blocks = [
        BlockAccessor.for_block(ray.get(ref)).to_arrow()
        for bundle in data.iter_internal_ref_bundles()
        for ref in bundle.block_refs
    ]
    table = pa.concat_tables(blocks, promote_options="default") if blocks else pa.table({})
    per_rank = table.num_rows // world_size  # equal shares; the remainder is dropped, as Ray's equal split does
    return [
        ray.data.read_datasource(
            table_datasource(table.slice(rank * per_rank, per_rank)), num_cpus=0, override_num_blocks=1
        ).materialize()
        for rank in range(world_size)
    ]


class RunDatasets:
    """A run's datasets as its workers get them: the preprocessor fitted once, and each rank's shards.

    Args:
        admitted: The admitted run: its request (preprocessor, data config) and its resolved datasets.
        checkpoints: The run's checkpoint manager; it keeps the fitted preprocessor for every checkpoint.
        materialize_below_bytes: Datasets whose files take at most this are read once per attempt.
    """

    def __init__(self, admitted: AdmittedRun, checkpoints: Any, materialize_below_bytes: int = 0) -> None:
        self.request = admitted.request
        self.datasets = admitted.datasets
        self.checkpoints = checkpoints
        self.materialize_below_bytes = materialize_below_bytes
        self._preprocessor: Any = None

    def preprocessor_unfitted(self) -> bool:
        return self._preprocessor is None and bool(
            self.request.pickled_preprocessor or self.request.HasField("preprocessor")
        )

    def fit_preprocessor(self) -> Any:
        """Fits the run's preprocessor on the train dataset once per run (as Ray Train's driver does); blocks."""
        if self.preprocessor_unfitted():
            import cloudpickle
            import ray.data

            from trainwire_coordinator.execution.preprocessors import build_preprocessor

            if self.request.pickled_preprocessor:
                preprocessor = cloudpickle.loads(self.request.pickled_preprocessor)
            else:
                preprocessor = build_preprocessor(self.request.preprocessor)
            if preprocessor.fit_status().name in ("NOT_FITTED", "PARTIALLY_FITTED"):
                train = self.datasets["train"]
                preprocessor.fit((ray.data.read_csv if train.format == "csv" else ray.data.read_parquet)(train.uri))
            self._preprocessor = preprocessor
            self.checkpoints.preprocessor_bytes = cloudpickle.dumps(preprocessor)
        return self._preprocessor

    def shards(
        self, world_size: int, reservation: Any, uses_ray_data: bool, node_ids: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Each rank's shard of every dataset: Ray Data iterators, or ``ShardSpec``s a worker reads; blocks.

        Ray Data datasets are split across the ranks as the request's ``DataConfig`` says (``train``
        only by default); declarative trainers shard every dataset (their evaluation is allreduced).
        """
        preprocessor = self.fit_preprocessor()
        split = datasets_to_split(self.request.data_parallel, list(self.datasets))
        config = self.request.data_parallel.data_config
        hints = None if config.disable_shard_locality else node_ids
        shards: list[dict[str, Any]] = [{} for _ in range(world_size)]
        for name, ds in self.datasets.items():
            if uses_ray_data:
                options = config.execution_options
                ingest = options[name] if name in options else options["*"] if "*" in options else None
                iterators = split_beside_reservation(
                    ds,
                    world_size,
                    preprocessor,
                    reservation,
                    name in split,
                    self.materialize_below_bytes,
                    ingest,
                    hints,
                )
                for rank in range(world_size):
                    shards[rank][name] = iterators[rank]
            else:
                for rank in range(world_size):
                    shards[rank][name] = ShardSpec(
                        ds.uri, ds.format, rank, world_size, self.checkpoints.preprocessor_bytes
                    )
        return shards


async def report_if_slow(
    work: Awaitable[T], after_s: float, report: Callable[[], Awaitable[Any]], interrupt: asyncio.Event | None = None
) -> T | None:
    """Awaits ``work``; calls ``report`` once if it takes longer than ``after_s`` (a run never waits silently).

    Returns None at once when ``interrupt`` is set first (a cancelled run does not wait for the work,
    which carries on alone; a thread cannot be stopped).
    """
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait([task], timeout=after_s)
    if not done:
        await report()
    if interrupt is None:
        return await task
    interrupted = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait([task, interrupted], return_when=asyncio.FIRST_COMPLETED)
    finally:
        interrupted.cancel()
    return task.result() if task.done() else None


def _read_files(uri: str, fmt: str, files: list[str]) -> Iterator[pa.Table]:
    """The files' rows as blocks of at most 128Ki rows, so a large file does not become one huge block."""
    fs, _ = resolve(uri)
    dataset = pads.dataset(files, filesystem=fs, format=fmt)
    empty = True
    for batch in dataset.to_batches(batch_size=1 << 17):
        if batch.num_rows:
            empty = False
            yield pa.Table.from_batches([batch])
    if empty:
        yield dataset.schema.empty_table()


def files_size(uri: str, fmt: str = "") -> int:
    """The bytes the dataset's files take in the store."""
    dataset = open_dataset(uri, guess_format(uri, fmt))
    return sum(info.size or 0 for info in dataset.filesystem.get_file_info(list(dataset.files)))


def table_datasource(table: pa.Table) -> Any:
    """A Ray Data datasource of one in-memory table: one read task, which takes the resources its read is given."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class TableDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return table.nbytes

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None):
            meta = BlockMetadata(num_rows=table.num_rows, size_bytes=table.nbytes, exec_stats=None, input_files=None)
            return [ReadTask(lambda: [table], meta, schema=table.schema, per_task_row_limit=per_task_row_limit)]

        def get_name(self) -> str:
            return "TrainwireShard"

    return TableDatasource()


def files_datasource(uri: str, fmt: str = "") -> Any:
    """A Ray Data datasource of the parquet or CSV files at ``uri``: one read task per group of files.

    Unlike ``ray.data.read_parquet`` it starts no listing or sampling task of its own (those ask for
    a CPU each, whatever the caller passes), so every task of a read takes the resources given to
    ``ray.data.read_datasource`` and can run beside a placement group that holds every CPU.
    """
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    fmt = guess_format(uri, fmt)
    dataset = open_dataset(uri, fmt)
    files, schema = list(dataset.files), dataset.schema

    class FilesDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None):
            groups = [
                list(g) for g in np.array_split(np.array(files, dtype=object), max(1, min(parallelism, len(files))))
            ]
            return [
                ReadTask(
                    lambda group=group: _read_files(uri, fmt, group),
                    BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=tuple(group)),
                    schema=schema,
                    per_task_row_limit=per_task_row_limit,
                )
                for group in groups
                if group
            ]

        def get_name(self) -> str:
            return "TrainwireFiles"

    return FilesDatasource()
