"""A generation request as every front end hands it over, and the checks it passes first.

The OIP generate extension, the OpenAI API and gRPC ModelStreamInfer each parse
their own message into a ``GenerateRequest``; the values are checked here once,
each error naming the field as the caller's protocol spells it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwire_core.auth import Caller
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_predictor.generative.engine import SamplingParams

ROLES = ("system", "user", "assistant", "developer", "tool")
# A prompt's characters per position of the model's context, when no limit is set: past it the
# prompt cannot fit (a token spans far fewer characters), and it is refused before tokenizing.
CHARS_PER_POSITION = 32
# The largest sampling_parameters JSON text read from a gRPC request (its fields are a few numbers and texts).
MAX_PARAMETERS_BYTES = 64 << 10
# How deep its values may nest (a stop list or a logit_bias object is two levels).
MAX_PARAMETERS_DEPTH = 8
# The most messages in one chat: each is checked on the event loop.
MAX_MESSAGES = 4096
# The most alternatives per position a request may ask log-probabilities of (OpenAI's top_logprobs: 20).
MAX_LOGPROBS = 20
# The most entries of logit_bias (each becomes a write into a vocabulary-sized row).
MAX_LOGIT_BIAS = 1024


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
        max_prompt_chars: The most characters in a prompt (a chat's contents together), checked
            before tokenizing (0: 32 per position of the model's context).
        max_prompt_tokens: The most tokens in a prompt (0: the model's context).
        max_waiting_per_tenant: Requests of one tenant that may wait for a slot per model (0: no own limit).
        prefix_cache_bytes: Bytes of prompt prefixes' keys and values each model keeps for reuse (0: off).
        lora_bytes: Bytes of LoRA adapters' matrices each base model keeps loaded (least recently used out).
        pack_weights: Whether linear weights are packed once for oneDNN (faster steps, twice their memory).
    """

    max_tokens: int = 1024
    default_max_tokens: int = 16
    max_batch: int = 32
    max_waiting: int = 1024
    timeout_s: float = 300.0
    threads: int = 0
    max_prompt_chars: int = 0
    max_prompt_tokens: int = 0
    max_waiting_per_tenant: int = 0
    prefix_cache_bytes: int = 0
    lora_bytes: int = 256 << 20
    pack_weights: bool = True

    def prompt_chars(self, context: int) -> int:
        """The most characters of a prompt to a model of ``context`` positions."""
        return self.max_prompt_chars or context * CHARS_PER_POSITION

    def prompt_tokens(self, context: int) -> int:
        """The most tokens of a prompt to a model of ``context`` positions."""
        return min(self.max_prompt_tokens or context, context)


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat; an assistant's may carry its tool calls, a tool's the call it answers.

    Attributes:
        tool_calls: (id, function name, arguments as JSON text) of each call the assistant made.
        tool_call_id: The call a ``tool`` message answers.
        name: The message's author's name (OpenAI's ``name``).
    """

    role: str
    content: str
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def template(self) -> dict[str, Any]:
        """The message as chat templates take it (a call's arguments as an object, as their templates expect)."""
        doc: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            doc["tool_calls"] = [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": _arguments(arguments)}}
                for id_, name, arguments in self.tool_calls
            ]
        if self.tool_call_id is not None:
            doc["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            doc["name"] = self.name
        return doc


def _arguments(text: str) -> Any:
    """A call's arguments as an object when they are JSON (Hugging Face's templates render them with ``tojson``)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class GenerateRequest:
    """One generation, protocol-neutral.

    Attributes:
        model_name: A run name or id.
        model_version: A checkpoint id or alias ("" follows the model's traffic policy).
        prompt: The text to continue (when ``messages`` and ``prompt_ids`` are empty).
        prompt_ids: The prompt as token ids (OpenAI's completions take them), checked against the model's vocabulary.
        messages: A chat: rendered with the tokenizer's chat template (or a plain one).
        params: How to sample, with the deadline already set.
        routing_key: Sticky routing, as for inference.
        prompt_field: The prompt's name in the caller's protocol (``prompt``, ``text_input``, ...), for errors.
        tools: A chat's tools as the chat template takes them (OpenAI's ``{"type": "function", ...}``).
        tools_chars: The tools' characters as JSON (they are rendered into the prompt, so count in its size).
        tenant: Whose share of the decode slots it takes: the caller's token name ("" for anonymous callers).
        weight: The tenant's weight in the fair share (the token's).
    """

    model_name: str
    model_version: str = ""
    prompt: str = ""
    prompt_ids: tuple[int, ...] = ()
    messages: tuple[ChatMessage, ...] = ()
    params: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=16))
    routing_key: str = ""
    prompt_field: str = "prompt"
    tenant: str = ""
    weight: float = 1.0
    tools: tuple[Mapping[str, Any], ...] = ()
    tools_chars: int = 0

    @property
    def field(self) -> str:
        """The field that holds this request's prompt (its messages, for a chat)."""
        return "messages" if self.messages else self.prompt_field

    def prompt_chars(self) -> int:
        """The characters of the prompt, or of the chat's contents together."""
        if self.prompt_ids:
            return len(self.prompt_ids)  # no text: each token counts as one
        if self.messages:
            return sum(len(m.content) for m in self.messages) + self.tools_chars
        return len(self.prompt)


def tenant_of(caller: Caller) -> dict[str, Any]:
    """A ``GenerateRequest``'s ``tenant`` and ``weight`` fields for ``caller``."""
    return {"tenant": caller.name, "weight": caller.weight}


def _number(doc: Mapping[str, Any], key: str, name: str, kind: type, default: Any) -> Any:
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise InvalidArgumentError(f"{name} must be {'a number' if kind is float else 'an integer'}", field=name)
    if kind is float:
        try:
            value = float(value)  # an integer past a float's range overflows
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{name} must be finite", field=name)
    return kind(value)


def sampling_params(
    doc: Mapping[str, Any],
    limits: GenerateLimits,
    prefix: str = "",
    temperature: float = 0.0,
    time_remaining_s: float | None = None,
    scoring: bool = False,
) -> SamplingParams:
    """Checks the sampling fields of ``doc`` (a JSON object's or parameters' values).

    Args:
        doc: ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``, ``timeout_s``,
            ``presence_penalty``, ``frequency_penalty`` and ``logit_bias``, each optional.
        limits: The operator's.
        prefix: Put before each field's name in errors (e.g. ``parameters.``).
        temperature: The protocol's default (OpenAI's is 1, the generate extension's greedy 0).
        time_remaining_s: The call's own deadline (gRPC's), which the generation does not outlive.
        scoring: The request scores its prompt (OpenAI's ``echo``): ``max_tokens`` may be 0.

    Raises:
        InvalidArgumentError: A bad value, naming its field.
    """
    name = f"{prefix}max_tokens"
    max_tokens = _number(doc, "max_tokens", name, int, limits.default_max_tokens)
    least = 0 if scoring else 1
    if not least <= max_tokens <= limits.max_tokens:
        raise InvalidArgumentError(
            f"{name} must be between {least} and {limits.max_tokens}, not {max_tokens}", field=name
        )
    temp = _number(doc, "temperature", f"{prefix}temperature", float, temperature)
    if not 0.0 <= temp <= 2.0:
        raise InvalidArgumentError(f"{prefix}temperature must be between 0 and 2", field=f"{prefix}temperature")
    top_p = _number(doc, "top_p", f"{prefix}top_p", float, 1.0)
    if not 0.0 < top_p <= 1.0:
        raise InvalidArgumentError(f"{prefix}top_p must be above 0 and at most 1", field=f"{prefix}top_p")
    seed = _number(doc, "seed", f"{prefix}seed", int, None)
    if seed is not None and not -(2**63) <= seed < 2**64:
        raise InvalidArgumentError(f"{prefix}seed must fit in 64 bits", field=f"{prefix}seed")
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
    if time_remaining_s is not None:
        timeout = min(timeout, time_remaining_s)
    deadline = time.monotonic() + min(timeout, limits.timeout_s)
    penalties = {}
    for key in ("presence_penalty", "frequency_penalty"):
        penalties[key] = _number(doc, key, f"{prefix}{key}", float, 0.0)
        if not -2.0 <= penalties[key] <= 2.0:
            raise InvalidArgumentError(f"{prefix}{key} must be between -2 and 2", field=f"{prefix}{key}")
    bias = logit_bias(doc.get("logit_bias"), f"{prefix}logit_bias")
    return SamplingParams(max_tokens, temp, top_p, seed, tuple(stop), deadline, logit_bias=bias, **penalties)


def logit_bias(value: Any, name: str = "logit_bias") -> tuple[tuple[int, float], ...]:
    """OpenAI's ``{"token id": bias}`` (bias -100 to 100) as (id, bias) pairs.

    The ids' range is the model's vocabulary, checked once the model is known.
    """
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must be an object of token ids to biases", field=name)
    if len(value) > MAX_LOGIT_BIAS:
        raise InvalidArgumentError(f"{name} has {len(value)} entries, over the limit of {MAX_LOGIT_BIAS}", field=name)
    pairs = []
    for key, bias in value.items():
        key_text = str(key)
        if not (key_text.isascii() and key_text.isdigit()) or len(key_text) > 12:
            raise InvalidArgumentError(f"{name} keys must be token ids, not {key_text[:40]!r}", field=name)
        where = f"{name}.{key_text}"
        number = _number({"bias": bias}, "bias", where, float, 0.0)
        if not -100.0 <= number <= 100.0:
            raise InvalidArgumentError(f"{where} must be between -100 and 100", field=where)
        pairs.append((int(key_text), number))
    return tuple(sorted(pairs))


def logprob_count(value: Any, name: str) -> int | None:
    """A count of most likely alternatives to return per position (0 to ``MAX_LOGPROBS``), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise InvalidArgumentError(f"{name} must be an integer between 0 and {MAX_LOGPROBS}", field=name)
    return value


def parameters_object(text: Any, name: str) -> dict[str, Any]:
    """A JSON object given as text (gRPC's ``sampling_parameters``), refused with its field when it is not one.

    Every way a text can fail to parse (bad JSON, nesting past the parser's depth, a number
    that overflows) is the caller's error, never the server's.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be a JSON object as text", field=name)
    if len(text) > MAX_PARAMETERS_BYTES:
        raise InvalidArgumentError(f"{name} is over {MAX_PARAMETERS_BYTES} characters", field=name)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError, OverflowError) as exc:
        raise InvalidArgumentError(f"{name} is not JSON: {type(exc).__name__}: {exc}"[:300], field=name) from exc
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"{name} must be a JSON object", field=name)
    if not _nested_within(doc, MAX_PARAMETERS_DEPTH):
        # The parser's own limit follows the interpreter's recursion limit, which a host may raise.
        raise InvalidArgumentError(f"{name} is nested deeper than {MAX_PARAMETERS_DEPTH} levels", field=name)
    return doc


def _nested_within(value: Any, depth: int) -> bool:
    """Whether ``value`` holds no list or object more than ``depth`` levels down."""
    if isinstance(value, dict | list):
        if depth == 0:
            return False
        return all(_nested_within(v, depth - 1) for v in (value.values() if isinstance(value, dict) else value))
    return True


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
    if len(value) > MAX_MESSAGES:
        raise InvalidArgumentError(f"{name} has {len(value)} messages, over the limit of {MAX_MESSAGES}", field=name)
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


def render_chat(tokenizer: Any, messages: tuple[ChatMessage, ...], tools: tuple[Mapping[str, Any], ...] = ()) -> str:
    """The prompt of a chat: the tokenizer's chat template, else ``role: content`` lines and ``assistant:``.

    Raises:
        InvalidArgumentError: The template refuses the conversation (its ``raise_exception``).
        FailedPreconditionError: Tools given to a model whose tokenizer has no chat template to render them.
    """
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError

        try:
            return tokenizer.apply_chat_template(
                [m.template() for m in messages],
                tools=[dict(t) for t in tools] or None,
                tokenize=False,
                add_generation_prompt=True,
            )
        except TemplateError as exc:  # the template refuses this conversation (its raise_exception)
            raise InvalidArgumentError(
                f"the model's chat template refused messages: {exc}"[:500], field="messages"
            ) from exc
    if tools:
        raise FailedPreconditionError(
            "this model's tokenizer has no chat template, which tools need to reach the model", field="tools"
        )
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"
