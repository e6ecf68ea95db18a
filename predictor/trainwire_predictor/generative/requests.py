"""A generation request as every front end hands it over, and the checks it passes first.

The OIP generate extension, the OpenAI API and gRPC ModelStreamInfer each parse
their own message into a ``GenerateRequest``; the values are checked here once,
each error naming the field as the caller's protocol spells it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.generative.engine import SamplingParams

ROLES = ("system", "user", "assistant", "developer", "tool")


@dataclass(frozen=True)
class GenerateLimits:
    """What the operator allows one generation.

    Args:
        max_tokens: The most new tokens a request may ask for.
        default_max_tokens: New tokens when a request names none.
        max_batch: Sequences one model decodes together.
        max_waiting: Requests that may wait for a slot per model.
        timeout_s: The longest a generation runs (a request may ask for less).
        threads: Torch threads of each model's decode thread (0: all cores but one).
    """

    max_tokens: int = 1024
    default_max_tokens: int = 16
    max_batch: int = 32
    max_waiting: int = 1024
    timeout_s: float = 300.0
    threads: int = 0


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class GenerateRequest:
    """One generation, protocol-neutral.

    Attributes:
        model_name: A run name or id.
        model_version: A checkpoint id or alias ("" follows the model's traffic policy).
        prompt: The text to continue (when ``messages`` is empty).
        messages: A chat: rendered with the tokenizer's chat template (or a plain one).
        params: How to sample, with the deadline already set.
        routing_key: Sticky routing, as for inference.
    """

    model_name: str
    model_version: str = ""
    prompt: str = ""
    messages: tuple[ChatMessage, ...] = ()
    params: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=16))
    routing_key: str = ""


def _number(doc: Mapping[str, Any], key: str, name: str, kind: type, default: Any) -> Any:
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise InvalidArgumentError(f"{name} must be {'a number' if kind is float else 'an integer'}", field=name)
    if kind is float and not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be finite", field=name)
    return kind(value)


def sampling_params(
    doc: Mapping[str, Any], limits: GenerateLimits, prefix: str = "", temperature: float = 0.0
) -> SamplingParams:
    """Checks the sampling fields of ``doc`` (a JSON object's or parameters' values).

    Args:
        doc: ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop`` and ``timeout_s``, each optional.
        limits: The operator's.
        prefix: Put before each field's name in errors (e.g. ``parameters.``).
        temperature: The protocol's default (OpenAI's is 1, the generate extension's greedy 0).

    Raises:
        InvalidArgumentError: A bad value, naming its field.
    """
    name = f"{prefix}max_tokens"
    max_tokens = _number(doc, "max_tokens", name, int, limits.default_max_tokens)
    if not 1 <= max_tokens <= limits.max_tokens:
        raise InvalidArgumentError(f"{name} must be between 1 and {limits.max_tokens}, not {max_tokens}", field=name)
    temp = _number(doc, "temperature", f"{prefix}temperature", float, temperature)
    if not 0.0 <= temp <= 2.0:
        raise InvalidArgumentError(f"{prefix}temperature must be between 0 and 2", field=f"{prefix}temperature")
    top_p = _number(doc, "top_p", f"{prefix}top_p", float, 1.0)
    if not 0.0 < top_p <= 1.0:
        raise InvalidArgumentError(f"{prefix}top_p must be above 0 and at most 1", field=f"{prefix}top_p")
    seed = _number(doc, "seed", f"{prefix}seed", int, None)
    stop = doc.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise InvalidArgumentError(
            f"{prefix}stop must be a text or a list of up to 4 non-empty texts", field=f"{prefix}stop"
        )
    timeout = _number(doc, "timeout_s", f"{prefix}timeout_s", float, limits.timeout_s)
    if not 0.0 < timeout:
        raise InvalidArgumentError(f"{prefix}timeout_s must be above 0", field=f"{prefix}timeout_s")
    deadline = time.monotonic() + min(timeout, limits.timeout_s)
    return SamplingParams(max_tokens, temp, top_p, seed, tuple(stop), deadline)


def prompt_text(value: Any, name: str) -> str:
    """A non-empty prompt (OpenAI allows a list of one)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty text", field=name)
    return value


def chat_messages(value: Any, name: str = "messages") -> tuple[ChatMessage, ...]:
    """A non-empty list of ``{"role", "content"}`` objects, each checked."""
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty list of messages", field=name)
    out = []
    for i, message in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(message, dict):
            raise InvalidArgumentError(f"{where} must be an object", field=where)
        role = message.get("role")
        if role not in ROLES:
            raise InvalidArgumentError(f"{where}.role must be one of {', '.join(ROLES)}", field=f"{where}.role")
        content = message.get("content")
        if isinstance(content, list):  # OpenAI's content parts: only text ones
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
            ):
                raise InvalidArgumentError(f"{where}.content parts must be text", field=f"{where}.content")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise InvalidArgumentError(f"{where}.content must be a text", field=f"{where}.content")
        out.append(ChatMessage(role, content))
    return tuple(out)


def render_chat(tokenizer: Any, messages: tuple[ChatMessage, ...]) -> str:
    """The prompt of a chat: the tokenizer's chat template, else ``role: content`` lines and ``assistant:``."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages], tokenize=False, add_generation_prompt=True
        )
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"
