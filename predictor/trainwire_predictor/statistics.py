"""Per model and version: request counts and where their time went (Triton's statistics extension).

The servicer and the batcher report three events; ``Statistics`` keeps the
cumulative figures the ModelStatistics RPC answers with, and any other
``Recorder`` (the Prometheus metrics) gets the same events.

- a request succeeded: its rows, its Timing (queue, input, infer, output) and
  its end-to-end duration;
- a request failed (after its model was found), with its duration;
- the model was called once (an execution) on some rows, which may be several
  batched requests.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import struct
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_predictor.models import ModelRef


def now_ns() -> int:
    return time.perf_counter_ns()


class Timing:
    """Where one request's time went, in nanoseconds; filled in by the batcher."""

    __slots__ = ("start_ns", "enqueued_ns", "queue_ns", "input_ns", "infer_ns", "output_ns", "rows")

    def __init__(self, start_ns: int | None = None) -> None:
        self.start_ns = now_ns() if start_ns is None else start_ns
        self.enqueued_ns = self.start_ns
        self.queue_ns = self.input_ns = self.infer_ns = self.output_ns = 0
        self.rows = 0


def model_labels(ref: ModelRef) -> tuple[str, str]:
    """The (model, version) a checkpoint is reported under (statistics and metrics): its run's name
    (else id) and its number (else its id): Triton's versions are integers, and its tools parse them."""
    return (ref.run_name or ref.run_id, ref.number_text or ref.checkpoint_id)


class Recorder(Protocol):
    def success(self, ref: ModelRef, timing: Timing, duration_ns: int) -> None: ...

    def failure(self, ref: ModelRef, duration_ns: int) -> None: ...

    def execution(self, ref: ModelRef, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None: ...


class Recorders:
    """Sends each event to every recorder."""

    def __init__(self, recorders: Iterable[Recorder]) -> None:
        self.recorders = list(recorders)
        if len(self.recorders) == 1:
            # One recorder (no metrics port): its methods themselves, a call less per event.
            only = self.recorders[0]
            self.success = only.success  # type: ignore[method-assign]
            self.failure = only.failure  # type: ignore[method-assign]
            self.execution = only.execution  # type: ignore[method-assign]

    def success(self, ref: ModelRef, timing: Timing, duration_ns: int) -> None:
        for r in self.recorders:
            r.success(ref, timing, duration_ns)

    def failure(self, ref: ModelRef, duration_ns: int) -> None:
        for r in self.recorders:
            r.failure(ref, duration_ns)

    def execution(self, ref: ModelRef, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        for r in self.recorders:
            r.execution(ref, rows, input_ns, infer_ns, output_ns)


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += max(0, ns)

    def proto(self) -> pb.StatisticDuration:
        return pb.StatisticDuration(count=self.count, ns=self.ns)

    def json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _Batch:
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)


@dataclass
class ModelStats:
    """One model version's cumulative figures; ``proto`` and ``json`` give Triton's two forms."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    batches: dict[int, _Batch] = field(default_factory=dict)

    def proto(self, name: str = "") -> pb.ModelStatistics:
        return pb.ModelStatistics(
            name=name or self.name,
            version=self.version,
            last_inference=self.last_inference_ms,
            inference_count=self.inference_count,
            execution_count=self.execution_count,
            inference_stats=pb.InferStatistics(
                success=self.success.proto(),
                fail=self.fail.proto(),
                queue=self.queue.proto(),
                compute_input=self.compute_input.proto(),
                compute_infer=self.compute_infer.proto(),
                compute_output=self.compute_output.proto(),
                cache_hit=pb.StatisticDuration(),
                cache_miss=pb.StatisticDuration(),
            ),
            batch_stats=[
                pb.InferBatchStatistics(
                    batch_size=size,
                    compute_input=b.compute_input.proto(),
                    compute_infer=b.compute_infer.proto(),
                    compute_output=b.compute_output.proto(),
                )
                for size, b in sorted(self.batches.items())
            ],
        )

    def json(self, name: str = "") -> dict:
        """Triton's JSON form (``GET /v2/models/{m}/stats``)."""
        stats = {
            "success": self.success,
            "fail": self.fail,
            "queue": self.queue,
            "compute_input": self.compute_input,
            "compute_infer": self.compute_infer,
            "compute_output": self.compute_output,
            "cache_hit": _Duration(),
            "cache_miss": _Duration(),
        }
        return {
            "name": name or self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {key: d.json() for key, d in stats.items()},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.json(),
                    "compute_infer": b.compute_infer.json(),
                    "compute_output": b.compute_output.json(),
                }
                for size, b in sorted(self.batches.items())
            ],
        }


class Statistics:
    """Cumulative statistics of every model version this predictor has served (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[tuple[str, str], ModelStats] = {}

    def _model(self, ref: ModelRef) -> ModelStats:
        model = self._models.get(ref.key)
        if model is None:
            model = self._models[ref.key] = ModelStats(*model_labels(ref))
        return model

    def success(self, ref: ModelRef, timing: Timing, duration_ns: int) -> None:
        last_ms = time.time_ns() // 1_000_000
        with self._lock:
            m = self._model(ref)
            m.last_inference_ms = last_ms
            m.inference_count += timing.rows
            # _Duration.add, inlined: this runs for every request.
            for d, ns in (
                (m.success, duration_ns),
                (m.queue, timing.queue_ns),
                (m.compute_input, timing.input_ns),
                (m.compute_infer, timing.infer_ns),
                (m.compute_output, timing.output_ns),
            ):
                d.count += 1
                d.ns += ns if ns > 0 else 0

    def failure(self, ref: ModelRef, duration_ns: int) -> None:
        with self._lock:
            m = self._model(ref)
            m.last_inference_ms = time.time_ns() // 1_000_000
            m.fail.add(duration_ns)

    def execution(self, ref: ModelRef, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        with self._lock:
            m = self._model(ref)
            m.execution_count += 1
            batch = m.batches.get(rows)
            if batch is None:
                batch = m.batches[rows] = _Batch()
            batch.compute_input.add(input_ns)
            batch.compute_infer.add(infer_ns)
            batch.compute_output.add(output_ns)

    def records(self, run_id: str = "", version: str = "", name: str = "") -> list[ModelStats]:
        """Copies of the figures of every model (no run_id), every version of one run, or one version.

        ``name`` replaces the reported model name (the name the caller asked for).
        """
        with self._lock:
            chosen = [
                copy.deepcopy(m)
                for (rid, ckpt), m in sorted(self._models.items(), key=lambda kv: (kv[1].name, kv[0]))
                if (not run_id or rid == run_id) and (not version or ckpt == version)
            ]
        for m in chosen:
            m.name = name or m.name
        return chosen

    def snapshot(self, run_id: str = "", version: str = "", name: str = "") -> list[pb.ModelStatistics]:
        """``records`` as ModelStatistics messages."""
        return [m.proto() for m in self.records(run_id, version, name)]

    def zero(self, ref: ModelRef, name: str = "") -> ModelStats:
        """The statistics of a version that has had no request yet."""
        stats = ModelStats(*model_labels(ref))
        stats.name = name or stats.name
        return stats


class SharedStatistics(Statistics):
    """``Statistics`` summed over the predictor processes of one ``--workers N`` group.

    Each process keeps its own figures and mirrors them into a memory-mapped file of its own in
    ``directory`` (prometheus_client's multiprocess format: a key and two doubles per value);
    any process answers with the sum over every file there. A write is a store into shared
    memory, so an answer counts every request finished before it, whichever process served it;
    the files of processes that died stay, so a restarted worker's earlier requests still count.
    A duration's count and nanoseconds share one key (its two doubles), as do a model's last
    inference and inference count, so a request costs seven writes and a model call four, with
    keys built once per model and batch size. Values are doubles, as Prometheus's: nanosecond
    sums are exact up to 2**53 ns (104 days of summed time per process), within a part in
    10**16 beyond.

    Args:
        directory: The group's statistics folder (created if missing).
    """

    def __init__(self, directory: str) -> None:
        from prometheus_client.mmap_dict import MmapedDict

        super().__init__()
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        # pid and a random part: a later process given the same pid must not write over this one's file.
        self._file = MmapedDict(os.path.join(directory, f"stats_{os.getpid()}_{uuid.uuid4().hex[:8]}.db"))
        self._write = self._file.write_value
        self._prefixes: dict[tuple[str, str], str] = {}
        # (model key, batch size or 0 for the request figures) -> the keys its writes use, in field order.
        self._keys: dict[tuple[tuple[str, str], int], tuple[str, ...]] = {}

    def _keys_of(self, ref: ModelRef, m: ModelStats, rows: int = 0) -> tuple[str, ...]:
        """The keys of a model's request figures (``rows`` 0) or of one batch size's figures."""
        keys = self._keys.get((ref.key, rows))
        if keys is None:
            prefix = self._prefixes.get(ref.key)
            if prefix is None:
                # A JSON list without its closing bracket: each value's key adds its field.
                prefix = self._prefixes[ref.key] = json.dumps([ref.key[0], ref.key[1], m.name, m.version])[:-1]
            if rows:
                fields = [f'{prefix},"{name}",{rows}]' for name in _BATCH_DURATIONS]
                keys = (f'{prefix},"executions"]', *fields)
            else:
                keys = (f'{prefix},"last"]', *(f'{prefix},"{name}"]' for name in (*_SUCCESS_DURATIONS, "fail")))
            self._keys[(ref.key, rows)] = keys
        return keys

    def success(self, ref: ModelRef, timing: Timing, duration_ns: int) -> None:
        super().success(ref, timing, duration_ns)
        with self._lock:
            m = self._models[ref.key]
            last, success, queue, compute_input, compute_infer, compute_output, _ = self._keys_of(ref, m)
            write = self._write
            write(last, m.last_inference_ms, m.inference_count)
            write(success, m.success.count, m.success.ns)
            write(queue, m.queue.count, m.queue.ns)
            write(compute_input, m.compute_input.count, m.compute_input.ns)
            write(compute_infer, m.compute_infer.count, m.compute_infer.ns)
            write(compute_output, m.compute_output.count, m.compute_output.ns)

    def failure(self, ref: ModelRef, duration_ns: int) -> None:
        super().failure(ref, duration_ns)
        with self._lock:
            m = self._models[ref.key]
            keys = self._keys_of(ref, m)
            self._write(keys[0], m.last_inference_ms, m.inference_count)
            self._write(keys[-1], m.fail.count, m.fail.ns)

    def execution(self, ref: ModelRef, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        super().execution(ref, rows, input_ns, infer_ns, output_ns)
        with self._lock:
            m = self._models[ref.key]
            executions, compute_input, compute_infer, compute_output = self._keys_of(ref, m, rows)
            batch = m.batches[rows]
            write = self._write
            write(executions, m.execution_count, 0.0)
            write(compute_input, batch.compute_input.count, batch.compute_input.ns)
            write(compute_infer, batch.compute_infer.count, batch.compute_infer.ns)
            write(compute_output, batch.compute_output.count, batch.compute_output.ns)

    def records(self, run_id: str = "", version: str = "", name: str = "") -> list[ModelStats]:
        from prometheus_client.mmap_dict import MmapedDict

        summed: dict[tuple[str, str], ModelStats] = {}
        for path in glob.glob(os.path.join(self.directory, "stats_*.db")):
            try:
                values = list(MmapedDict.read_all_values_from_file(path))
            except (OSError, struct.error):
                continue  # a file being created this instant: it holds nothing yet
            for text, first, second, _ in values:
                rid, ckpt, model_name, model_version, field_name, *rest = json.loads(text)
                if (run_id and rid != run_id) or (version and ckpt != version):
                    continue
                m = summed.get((rid, ckpt))
                if m is None:
                    m = summed[(rid, ckpt)] = ModelStats(model_name, model_version)
                if field_name == "last":  # the last inference's time, and the inference count
                    m.last_inference_ms = max(m.last_inference_ms, int(first))
                    m.inference_count += int(second)
                elif field_name == "executions":
                    m.execution_count += int(first)
                else:
                    # A duration's count and ns; rest holds the batch size of a batch's durations.
                    owner: object = m
                    if rest:
                        owner = m.batches.get(rest[0]) or m.batches.setdefault(rest[0], _Batch())
                    d = getattr(owner, field_name)
                    d.count += int(first)
                    d.ns += int(second)
        chosen = [m for _, m in sorted(summed.items(), key=lambda kv: (kv[1].name, kv[0]))]
        for m in chosen:
            m.name = name or m.name
        return chosen


_SUCCESS_DURATIONS = ("success", "queue", "compute_input", "compute_infer", "compute_output")
_BATCH_DURATIONS = ("compute_input", "compute_infer", "compute_output")
