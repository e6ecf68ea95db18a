"""One model call on a decoded batch, on a worker thread: decode, score, pick the outputs, time each."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_predictor.codec import select_outputs, to_batch
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, decode_inputs
from trainwire_predictor.models import LoadedModel
from trainwire_predictor.statistics import Recorder, Timing, now_ns

# Errors a model raises on input it cannot score (wrong width, bad values): the caller's fault.
SCORING_ERRORS = (ValueError, TypeError, KeyError, IndexError, RuntimeError)

Batch = dict[str, np.ndarray] | np.ndarray


def score(request: InferenceRequest, model: LoadedModel, batch: Batch) -> dict[str, np.ndarray]:
    """Runs the model's Predictor on one decoded batch; input it cannot score is INVALID_ARGUMENT."""
    try:
        return model.predictor.predict_columns(batch)
    except TrainwireError:
        raise
    except SCORING_ERRORS as exc:
        raise InvalidArgumentError(
            f"model {request.model_name!r} cannot score this input: {type(exc).__name__}: {exc}", field="inputs"
        ) from exc


def infer_sync(
    request: InferenceRequest,
    model: LoadedModel,
    timing: Timing | None = None,
    recorder: Recorder | None = None,
) -> InferenceResponse:
    """Decodes, scores and picks the outputs of one request (on a worker thread)."""
    t0 = now_ns()
    batch = to_batch(decode_inputs(request), model)
    t1 = now_ns()
    out = score(request, model, batch)
    t2 = now_ns()
    response = select_outputs(request, model, out)
    t3 = now_ns()
    if timing is not None:
        timing.queue_ns = t0 - timing.enqueued_ns
        timing.input_ns, timing.infer_ns, timing.output_ns = t1 - t0, t2 - t1, t3 - t2
        timing.rows = _rows(batch)
    if recorder is not None:
        recorder.execution(model.ref, _rows(batch), t1 - t0, t2 - t1, t3 - t2)
    return response


def _signature(batch: Batch) -> tuple[Any, ...]:
    if isinstance(batch, dict):
        return ("columns", tuple((name, arr.dtype.str) for name, arr in batch.items()))
    return ("matrix", batch.dtype.str, batch.shape[1:])


def _rows(batch: Batch) -> int:
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def _concat(batches: list[Batch]) -> Batch:
    if isinstance(batches[0], dict):
        return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}  # type: ignore[index]
    return np.concatenate(batches)  # type: ignore[arg-type]
