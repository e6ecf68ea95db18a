"""Tools (function calling): the tools' definitions, ``tool_choice``, and tool calls parsed from the text.

The tools are rendered into the prompt by the tokenizer's chat template (``apply_chat_template(...,
tools=...)``), which also teaches the model how to call one. trainwire reads calls in the format of
Hermes and Qwen's templates, the most common among open models (vLLM's ``hermes`` parser)::

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

``tool_choice`` "required" or a named function forces a call: the generation is constrained by a
grammar of exactly that text (``generative.grammar.tool_call_grammar``), with the arguments a value
of the function's parameters' schema. ``ToolCallParser`` reads calls out of the text as it streams,
so a streamed answer sends a call's name first and its arguments in pieces, as OpenAI streams them.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwire_core.errors import InvalidArgumentError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# OpenAI's limits: a function's name and the number of tools one request may give.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS = 128
# A call's head up to its arguments, as the forced grammar writes it (a model's own may put
# "arguments" first: that call is read whole once it closes).
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
# The empty parameter list of a function that declares none (OpenAI's reading of a missing ``parameters``).
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    parameters: Mapping[str, Any]
    description: str | None = None
    strict: bool | None = None

    def template(self) -> dict[str, Any]:
        """The tool as chat templates take it (OpenAI's shape)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    """What the model may do with the tools: ``none``, ``auto``, ``required`` or call ``name`` (``named``)."""

    mode: Literal["none", "auto", "required", "named"]
    name: str = ""

    @property
    def forced(self) -> bool:
        """A call must be made (constrained by a grammar)."""
        return self.mode in ("required", "named")


def parse_tools(value: Any, name: str = "tools") -> tuple[Tool, ...]:
    """OpenAI's ``tools``: a list of ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    Raises:
        InvalidArgumentError: A malformed tool, a bad or repeated name, naming its field.
    """
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty list of tools", field=name)
    if len(value) > MAX_TOOLS:
        raise InvalidArgumentError(f"{name} has {len(value)} tools, over the limit of {MAX_TOOLS}", field=name)
    tools, seen = [], set()
    for i, tool in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(tool, Mapping):
            raise InvalidArgumentError(f"{where} must be an object", field=where)
        if tool.get("type") != "function":
            raise InvalidArgumentError(f"{where}.type must be function", field=f"{where}.type")
        function = tool.get("function")
        where = f"{where}.function"
        if not isinstance(function, Mapping):
            raise InvalidArgumentError(f"{where} must be an object", field=where)
        fname = function.get("name")
        if not isinstance(fname, str) or not _NAME.fullmatch(fname):
            raise InvalidArgumentError(
                f"{where}.name must be 1 to 64 letters, digits, underscores or dashes", field=f"{where}.name"
            )
        if fname in seen:
            raise InvalidArgumentError(f"{where}.name {fname!r} is given twice", field=f"{where}.name")
        seen.add(fname)
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidArgumentError(f"{where}.description must be a text", field=f"{where}.description")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = NO_PARAMETERS
        if not isinstance(parameters, Mapping):
            raise InvalidArgumentError(f"{where}.parameters must be a JSON schema object", field=f"{where}.parameters")
        strict = function.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidArgumentError(f"{where}.strict must be true or false", field=f"{where}.strict")
        tools.append(Tool(fname, parameters, description, strict))
    return tuple(tools)


def parse_tool_choice(value: Any, tools: tuple[Tool, ...], name: str = "tool_choice") -> ToolChoice:
    """OpenAI's ``tool_choice``: "none", "auto", "required" or ``{"type": "function", "function": {"name"}}``.

    Without it: "auto" when there are tools, else "none" (OpenAI's defaults).

    Raises:
        InvalidArgumentError: An unknown mode or function, or a choice without tools, naming the field.
    """
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise InvalidArgumentError(f"{name} must be none, auto, required or a function", field=name)
        if value != "none" and not tools:
            raise InvalidArgumentError(f"{name} {value!r} needs tools", field=name)
        return ToolChoice(value)  # type: ignore[arg-type]
    if not isinstance(value, Mapping) or value.get("type") != "function":
        raise InvalidArgumentError(
            f'{name} must be none, auto, required or {{"type": "function", "function": {{"name": ...}}}}',
            field=f"{name}.type" if isinstance(value, Mapping) else name,
        )
    function = value.get("function")
    fname = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(fname, str):
        raise InvalidArgumentError(f"{name}.function.name must be a text", field=f"{name}.function.name")
    if fname not in {t.name for t in tools}:
        raise InvalidArgumentError(
            f"{name}.function.name {fname[:64]!r} is not one of the tools", field=f"{name}.function.name"
        )
    return ToolChoice("named", fname)


def call_id() -> str:
    """A new tool call's id (OpenAI's ``call_`` and 24 characters)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of the parsed text: content, a call's start (its id and name), or a piece of its arguments."""

    kind: Literal["content", "call", "arguments"]
    text: str = ""  # the content, or the arguments' piece
    index: int = 0  # the call's place among this answer's calls
    id: str = ""
    name: str = ""


@dataclass
class ToolCall:
    """A whole call: its id, function name and arguments (a JSON text, as OpenAI gives it)."""

    id: str
    name: str
    arguments: str = ""


@dataclass
class ToolCallParser:
    """Reads tool calls out of generated text given in pieces (``feed``), then ``finish``.

    Text outside calls is content; text that could begin a call is held until it is known
    not to. A call's name is sent as soon as its head is read and its arguments as they come,
    all but the tail that could be the call's closing ``}`` and ``</tool_call>``. Whatever the
    pieces, the deltas add up to the same content and calls (a unary answer parses its whole
    text at once, a stream token by token).
    """

    calls: list[ToolCall] = field(default_factory=list)
    _mode: Literal["text", "head", "arguments"] = "text"
    _buffer: str = ""
    _sent: int = 0  # characters of the current call's arguments sent

    def feed(self, text: str) -> list[ToolCallDelta]:
        """The deltas that ``text`` (the next piece of the generation) makes known."""
        self._buffer += text
        out: list[ToolCallDelta] = []
        while True:
            before = (self._mode, len(self._buffer), len(self.calls), self._sent)
            if self._mode == "text":
                self._text(out)
            elif self._mode == "head":
                self._head(out)
            else:
                self._arguments(out)
            if (self._mode, len(self._buffer), len(self.calls), self._sent) == before:
                return out

    def finish(self) -> list[ToolCallDelta]:
        """The deltas of the text still held, once the generation has ended."""
        out: list[ToolCallDelta] = []
        if self._mode == "text" and self._buffer:
            self._content(out, self._buffer)
        elif self._mode == "head":  # a call that never got its head: it was text after all
            self._content(out, OPEN + self._buffer)
        elif self._mode == "arguments":  # cut short (max_tokens): the arguments as far as they came
            self._send_arguments(out, self._buffer)
        self._buffer, self._mode = "", "text"
        return out

    def _content(self, out: list[ToolCallDelta], text: str) -> None:
        if self.calls and not text.strip():
            return  # the blank between and after calls is no content
        if text:
            out.append(ToolCallDelta("content", text))

    def _text(self, out: list[ToolCallDelta]) -> None:
        at = self._buffer.find(OPEN)
        if at >= 0:
            self._content(out, self._buffer[:at])
            self._buffer, self._mode = self._buffer[at + len(OPEN) :], "head"
            return
        keep = _partial_suffix(self._buffer, OPEN)
        cut = len(self._buffer) - keep
        if cut and (not self.calls or self._buffer[:cut].strip()):
            self._content(out, self._buffer[:cut])
            self._buffer = self._buffer[cut:]

    def _head(self, out: list[ToolCallDelta]) -> None:
        match = _HEAD.match(self._buffer)
        # Only once the arguments have begun: the blank before them is the head's, however the text came.
        if match is not None and match.end() < len(self._buffer):
            try:
                name = json.loads(f'"{match.group(1)}"')
            except ValueError:
                name = match.group(1)
            call = ToolCall(call_id(), name)
            self.calls.append(call)
            out.append(ToolCallDelta("call", index=len(self.calls) - 1, id=call.id, name=name))
            self._buffer, self._mode, self._sent = self._buffer[match.end() :], "arguments", 0
            return
        end = self._buffer.find(CLOSE)
        if end < 0:
            return
        body, rest = self._buffer[:end], self._buffer[end + len(CLOSE) :]
        parsed = _whole_call(body)
        if parsed is None:  # not a call: the text as the model wrote it
            self._content(out, OPEN + body + CLOSE)
        else:
            call = ToolCall(call_id(), *parsed)
            self.calls.append(call)
            index = len(self.calls) - 1
            out.append(ToolCallDelta("call", index=index, id=call.id, name=call.name))
            out.append(ToolCallDelta("arguments", parsed[1], index=index))
            call.arguments = parsed[1]
        self._buffer, self._mode = rest, "text"

    def _arguments(self, out: list[ToolCallDelta]) -> None:
        end = self._buffer.find(CLOSE)
        if end >= 0:
            arguments = self._buffer[:end].rstrip()
            if arguments.endswith("}"):
                arguments = arguments[:-1].rstrip()  # the call object's own closing brace
            self._send_arguments(out, arguments)
            self._buffer, self._mode = self._buffer[end + len(CLOSE) :], "text"
            return
        self._send_arguments(out, self._buffer[: len(self._buffer) - _closing_tail(self._buffer)])

    def _send_arguments(self, out: list[ToolCallDelta], arguments: str) -> None:
        piece = arguments[self._sent :]
        if piece:
            self.calls[-1].arguments += piece
            out.append(ToolCallDelta("arguments", piece, index=len(self.calls) - 1))
            self._sent += len(piece)


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that begins ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def _closing_tail(text: str) -> int:
    """How many last characters of arguments may be the call's closing ``}`` and ``</tool_call>`` (held back).

    The blank before them is held too: the arguments sent never end in what the close strips.
    """
    brace = text.rfind("}")
    if brace >= 0 and CLOSE.startswith(text[brace + 1 :].lstrip()):
        return len(text) - len(text[:brace].rstrip())
    partial = _partial_suffix(text, CLOSE)
    return len(text) - len(text[: len(text) - partial].rstrip())


def _whole_call(body: str) -> tuple[str, str] | None:
    """A whole call's (name, arguments as JSON text), whatever its keys' order; None when it is none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return None
    arguments = doc.get("arguments", doc.get("parameters", {}))
    if isinstance(arguments, str):
        return doc["name"], arguments
    return doc["name"], json.dumps(arguments, ensure_ascii=False)
