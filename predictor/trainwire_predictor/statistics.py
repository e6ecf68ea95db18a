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
import threading
import time
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
