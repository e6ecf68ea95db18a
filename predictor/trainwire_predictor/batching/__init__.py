"""Scores concurrent requests for one model in one model call ("batch while busy").

A request that finds its model idle is scored at once, so a lone caller waits
for nothing; requests that arrive while the model is busy queue up and go
together in the next call. Only models whose answer for a row does not depend
on the other rows of the batch (``Predictor.batch_invariant``, e.g. tree
ensembles) are batched, so every answer equals the in-process one. Requests
batch only with requests of the same input form and dtypes.

A call measured to take at most ``inline_budget_ns`` for its rows (a compiled
tree model on a few small requests) is scored on the event loop at the end of
the loop iteration that queued its requests, together, whether the model was
idle or just finished a call: for a call that short, handing it to a thread and
back costs the loop more than the call (a wake-up each way, the GIL passed
between them). Longer calls go to the threads, beside the loop.

A busy gRPC server hands its requests to the data plane about one at a time
(each handler runs to its await before the next one starts), so an inline call
rarely finds company in its own loop turn. When the event loop itself is what
limits (its thread wanting a core at least ``GATHER_LOOP_BUSY`` of the last window), an
inline call waits ``GATHER_WAIT_S`` for the requests coming in behind it: a call
for several requests costs the loop far less than a call each, and the wait is
shorter than the queue it drains. A loop with time to spare never holds a call,
so a lone caller waits for nothing; and a model whose waits bring no company
(``_Gather``) stops waiting, trying again after ``GATHER_PROBE_EVERY`` calls, then after twice
as many each time a try brings none (up to ``GATHER_PROBE_MAX``).

Any other model is batched only under a ``DynamicBatching`` policy (Triton's
``dynamic_batching``): a request waits up to ``max_queue_delay_us`` for others
of the same input form, and their rows go in one call of at most
``max_batch_size`` rows, at once when the queue reaches that or a preferred
batch size. An ``adaptive`` policy also starts a call as soon as its queue holds as
many rows as the model has held at once lately (queued and in calls, within the last
second or two): a closed loop of N callers gathers its N rows without waiting out
the delay, and a lone caller is scored at once. Its delay counts from when the model
was last free, so callers that a slow call split into two groups join again. Such a
model's answer for a row may differ from its answer alone in the last bits (other
kernels for other batch shapes), which is why each framework chooses
(``FRAMEWORK_BATCHING``) and each model may choose again. A model that is batched is
prepared for multi-row calls when it loads (``prepare_batched``).
Whatever batches, answers are split back to their requests, and a call that
fails is retried request by request, so a bad row fails only its own request.

Each request's Timing gets its queue, input, infer and output times, and each
model call is reported to the recorder as one execution (the statistics and
metrics).
"""

from trainwire_predictor.batching.batcher import Batcher
from trainwire_predictor.batching.policy import (
    FRAMEWORK_BATCHING,
    DynamicBatching,
    batching_by_framework,
    parse_batching,
    prepare_batched,
)
from trainwire_predictor.batching.scoring import SCORING_ERRORS, Batch, infer_sync, score

__all__ = [
    "FRAMEWORK_BATCHING",
    "SCORING_ERRORS",
    "Batch",
    "Batcher",
    "DynamicBatching",
    "batching_by_framework",
    "infer_sync",
    "parse_batching",
    "prepare_batched",
    "score",
]
