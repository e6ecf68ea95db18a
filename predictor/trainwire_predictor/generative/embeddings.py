"""Sentence embeddings from encoder checkpoints (BERT-shaped ``transformers`` models).

The encoder's last hidden states are averaged over each input's attention mask and
L2-normalised: what sentence-transformers' mean pooling and ``Normalize`` module give
(``all-MiniLM-L6-v2`` and its kind), and what vLLM's embedding pooler returns by default.
The forward passes run off the event loop, a request's inputs batched together.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_predictor.generative.lazy import LazyModule
from trainwire_predictor.generative.service import language_model, max_context
from trainwire_predictor.inference import InferenceRequest
from trainwire_predictor.models import LoadedModel
from trainwire_predictor.routing import Router
from trainwire_predictor.statistics import Recorder, Timing, now_ns

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

# The most inputs in one request (OpenAI's own limit).
MAX_INPUTS = 2048
# Inputs in one forward pass: bounds the padded batch's memory.
FORWARD_BATCH = 32
# A text's characters per position of the model's context, past which it cannot fit (checked before tokenizing).
CHARS_PER_POSITION = 32


def encoder_model(model: LoadedModel) -> tuple[Any, Any] | None:
    """The (encoder, tokenizer) of a loaded HuggingFace text model that is not a causal LM; None otherwise.

    A task head (sequence classification, masked LM) is set aside: the embedding is its base model's.
    """
    pipeline = getattr(model.predictor, "pipeline", None)
    lm = getattr(pipeline, "model", None)
    tokenizer = getattr(pipeline, "tokenizer", None)
    if lm is None or tokenizer is None or not hasattr(lm, "config") or language_model(model) is not None:
        return None
    if getattr(lm.config, "is_encoder_decoder", False):
        return None
    return getattr(lm, "base_model", lm), tokenizer


@dataclass
class Embeddings:
    """One request's embeddings, in the inputs' order."""

    model_name: str
    model_version: str
    vectors: list[list[float]]
    prompt_tokens: int


def _encode(encoder: Any, batches: list[list[list[int]]], pad_id: int) -> list[list[float]]:
    """Mean-pooled, normalised embeddings of each batch's token ids (the engine's thread-free path)."""
    out: list[list[float]] = []
    with torch.inference_mode():
        for batch in batches:
            width = max(len(ids) for ids in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, tokens in enumerate(batch):
                ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                mask[row, : len(tokens)] = 1
            hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            weights = mask.unsqueeze(-1).float()
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            out.extend(torch.nn.functional.normalize(pooled, p=2, dim=1).tolist())
    return out


class TextEmbedder:
    """Embeddings for the front ends, over the same routing, loading and statistics as inference.

    Args:
        router: Resolves and loads each request's model.
        recorder: Told of each request, as one request of its model.
    """

    def __init__(self, router: Router, recorder: Recorder) -> None:
        self.router = router
        self.recorder = recorder

    async def embed(
        self,
        model_name: str,
        model_version: str,
        texts: list[str] | None = None,
        token_ids: list[list[int]] | None = None,
        routing_key: str = "",
        field: str = "input",
    ) -> Embeddings:
        """Embeds ``texts`` (tokenized with the model's special tokens) or ``token_ids`` (as given).

        Raises:
            TrainwireError: An unknown model, one that does not embed, or an input too long for
                the model or outside its vocabulary (naming ``input[i]``).
        """
        started = now_ns()
        routed = InferenceRequest(model_name, model_version, routing_key=routing_key)
        _, _, model = self.router.target_now(routed) or await self.router.target(routed)
        found = encoder_model(model)
        if found is None:
            raise FailedPreconditionError(
                f"model {model_name!r} ({model.framework}) does not embed: embeddings serve encoder text models",
                field="model",
            )
        encoder, tokenizer = found
        room = max_context(encoder)
        if texts is not None:
            for i, text in enumerate(texts):
                if len(text) > room * CHARS_PER_POSITION:
                    raise InvalidArgumentError(
                        f"{field}[{i}] has {len(text)} characters, over the limit of {room * CHARS_PER_POSITION}",
                        field=f"{field}[{i}]",
                    )
            token_ids = await asyncio.to_thread(lambda: tokenizer(texts, add_special_tokens=True)["input_ids"])
        assert token_ids is not None
        vocab = int(getattr(encoder.config, "vocab_size", 0) or 0)
        for i, ids in enumerate(token_ids):
            where = f"{field}[{i}]"
            if not ids:
                raise InvalidArgumentError(f"{where} has no tokens", field=where)
            if len(ids) > room:
                raise InvalidArgumentError(
                    f"{where} has {len(ids)} tokens, over the model's context of {room}", field=where
                )
            if vocab and not all(0 <= t < vocab for t in ids):
                raise InvalidArgumentError(f"{where} holds token ids outside 0..{vocab - 1}", field=where)
        # Inputs of like length share a forward pass (less padding); answers go back in order.
        order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
        batches = [
            [token_ids[i] for i in order[start : start + FORWARD_BATCH]]
            for start in range(0, len(order), FORWARD_BATCH)
        ]
        model.in_flight += 1  # the cache keeps the model while it embeds
        failed = True
        try:
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            pooled = await asyncio.to_thread(_encode, encoder, batches, pad)
            vectors: list[list[float]] = [[] for _ in order]
            for vector, i in zip(pooled, order, strict=True):
                vectors[i] = vector
            failed = False
            name = model.ref.run_name or model.ref.run_id
            return Embeddings(name, model.ref.checkpoint_id, vectors, sum(len(ids) for ids in token_ids))
        finally:
            model.in_flight -= 1
            if failed:
                self.recorder.failure(model.ref, now_ns() - started)
            else:
                self.recorder.success(model.ref, Timing(started), now_ns() - started)
