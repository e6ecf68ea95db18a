"""Structured outputs: a JSON schema's grammar as a token mask on each step of one sequence.

``llguidance`` compiles the schema into a grammar and, per step, says which tokens of the
model's vocabulary may come next (a bitmask over the vocabulary, built from the Hugging Face
tokenizer's own byte-level pieces). It is imported only when a request asks for a format:
a predictor without it serves everything else and refuses ``response_format`` plainly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_predictor.generative.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

# JSON without free whitespace: a model cannot pad the answer with blanks until max_tokens runs out
# (vLLM's guided decoding compacts JSON the same way).
_JSON_OPTIONS = {"whitespace_flexible": False}
# The largest schema text accepted (compiling is linear in it, but the checks run on the event loop).
MAX_SCHEMA_CHARS = 64 << 10
_TOKENIZERS_LOCK = threading.Lock()


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise FailedPreconditionError(
            "structured outputs need the llguidance package, not installed on this predictor",
            field="response_format",
        ) from exc
    return llguidance


@dataclass(frozen=True)
class Grammar:
    """A compiled format, shared by every sequence that asks for it (each gets its own matcher)."""

    text: str  # llguidance's grammar (JSON)
    name: str  # what the error messages call it

    def matcher(self, tokenizer: Any) -> Any:
        llguidance = _llguidance()
        return llguidance.LLMatcher(tokenizer, self.text, log_level=0)


def response_format_grammar(value: Any, field: str = "response_format") -> Grammar | None:
    """OpenAI's ``response_format`` as a grammar; None for ``{"type": "text"}`` or no format.

    ``{"type": "json_object"}``: any JSON object. ``{"type": "json_schema", "json_schema":
    {"name", "schema", "strict"}}``: a value the schema validates.

    Raises:
        InvalidArgumentError: A malformed format or a schema that does not compile, naming its field.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{field} must be an object", field=field)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema: Any = {"type": "object"}
        where, name = field, "json_object"
    elif kind == "json_schema":
        spec = value.get("json_schema")
        where = f"{field}.json_schema"
        if not isinstance(spec, dict):
            raise InvalidArgumentError(f"{where} must be an object with a schema", field=where)
        name = spec.get("name") or "schema"
        if not isinstance(name, str):
            raise InvalidArgumentError(f"{where}.name must be a text", field=f"{where}.name")
        schema = spec.get("schema", {})
        where = f"{where}.schema"
        if not isinstance(schema, dict):
            raise InvalidArgumentError(f"{where} must be a JSON schema object", field=where)
    else:
        raise InvalidArgumentError(f"{field}.type must be text, json_object or json_schema", field=f"{field}.type")
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidArgumentError(f"{where} is over {MAX_SCHEMA_CHARS} characters", field=where)
    return Grammar(_compiled(_llguidance(), text, where), name)


def tool_call_grammar(functions: list[tuple[str, Any, str]], parallel: bool = False) -> Grammar:
    """A forced tool call's grammar: ``<tool_call>{"name": NAME, "arguments": ARGS}</tool_call>``.

    The format of Hermes and Qwen's chat templates (``generative.tools``), with the arguments a
    value of the function's parameters' schema (compacted as ``response_format``'s are).

    Args:
        functions: Each function the call may name: (name, parameters' JSON schema, the schema's
            field in the request, for errors).
        parallel: One call or more (else exactly one).

    Raises:
        InvalidArgumentError: A parameters schema that does not compile, naming its field.
    """
    llguidance = _llguidance()
    bodies = []
    for name, schema, where in functions:
        text = json.dumps(schema)
        if len(text) > MAX_SCHEMA_CHARS:
            raise InvalidArgumentError(f"{where} is over {MAX_SCHEMA_CHARS} characters", field=where)
        _compiled(llguidance, text, where)  # each schema's own errors, named by its field
        compact = {**schema, "x-guidance": _JSON_OPTIONS}
        head = json.dumps(f'<tool_call>{{"name": {json.dumps(name)}, "arguments": ')
        bodies.append(f"{head} %json {json.dumps(compact)} {json.dumps('}</tool_call>')}")
    rules = "\n".join(f"call_{i}: {body}" for i, body in enumerate(bodies))
    call = " | ".join(f"call_{i}" for i in range(len(bodies)))
    start = 'start: call ("\\n" call)*' if parallel else "start: call"
    lark = f"{start}\ncall: {call}\n{rules}\n"
    where = functions[0][2] if len(functions) == 1 else "tools"
    grammar = _compiled(llguidance, lark, where, lark=True)
    return Grammar(grammar, "tool_call")


def _compiled(llguidance: Any, text: str, where: str, lark: bool = False) -> str:
    """llguidance's grammar of a JSON schema (or a Lark grammar), its errors naming ``where``."""
    try:
        if lark:
            grammar = llguidance.LLMatcher.grammar_from_lark(text)
        else:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, overrides=_JSON_OPTIONS)
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{where} does not compile: {exc}"[:500], field=where) from exc
    if failed:
        raise InvalidArgumentError(f"{where} does not compile: {'; '.join(messages)}"[:500], field=where)
    return grammar


def grammar_tokenizer(engine_tokenizer: Any, vocab: int, eos_ids: frozenset[int], cache: dict[str, Any]) -> Any:
    """llguidance's view of the model's tokenizer (built once per engine: about a second on large vocabularies)."""
    with _TOKENIZERS_LOCK:
        found = cache.get("grammar_tokenizer")
        if found is None:
            import llguidance.hf

            eos = sorted(eos_ids) or None
            found = llguidance.hf.from_tokenizer(engine_tokenizer, n_vocab=vocab, eos_token=eos)
            cache["grammar_tokenizer"] = found
        return found


class Constraint:
    """One sequence's place in its grammar: the tokens allowed next, and the tokens taken."""

    def __init__(self, matcher: Any, vocab: int) -> None:
        self.matcher = matcher
        self.vocab = vocab

    def allowed(self) -> torch.Tensor:
        """A boolean row over the vocabulary: True where the token may come next."""
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: self.vocab].astype(bool)
        if allowed.shape[0] < self.vocab:  # logits wider than the tokenizer's vocabulary: padding, never allowed
            allowed = np.pad(allowed, (0, self.vocab - allowed.shape[0]))
        return torch.from_numpy(allowed)

    def take(self, token: int) -> None:
        self.matcher.consume_token(token)

    @property
    def complete(self) -> bool:
        """The grammar has ended: nothing but the end of text may follow."""
        return bool(self.matcher.is_stopped())
