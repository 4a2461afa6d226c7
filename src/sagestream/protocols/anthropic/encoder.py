"""The stream is Anthropic's events, written as the deltas arrive: ``message_start`` with the first delta,
then per content block ``content_block_start``, its deltas (``text_delta``, ``thinking_delta``,
``input_json_delta`` with each argument fragment as the container sent it) and ``content_block_stop``;
``message_delta`` (``stop_reason``, usage) and ``message_stop`` at the end. Usage counts are integers, as
Anthropic's types declare them: ``message_start`` goes out with the first delta, before any container has
counted the prompt, so its ``input_tokens`` is 0 and ``message_delta`` carries the container's count when it
reports one (an output count not reported is 0). A deadline cut ends the message as
``max_tokens`` does, ``message_stop`` included (the log record notes the deadline stop); any other fault
after the first byte is one ``event: error`` and no ``message_stop``.

The events are written here by hand: the anthropic SDKs read them and write none, and a server library
would bring a web framework; tests/unit/protocols/anthropic/test_encoder.py feeds them to the SDK's own accumulator. The
request's models and translation are in :mod:`sagestream.protocols.anthropic.request`.

Environment variables read: none.

Example::

    >>> encoder = MessagesEncoder(model="m")
    >>> print(encoder.encode(Delta(content="Hello")).decode().split("\\n\\n")[2])
    event: content_block_delta
    data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any, Literal

from sagestream.delta import Delta, Usage, is_text_only
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.protocols._wire import dumps, event, json_string, new_id, padding

if TYPE_CHECKING:
    pass

__all__ = ["ERROR_TYPES", "MessagesEncoder", "error_object", "message_json"]


# --- the API --------------------------------------------------------------------------------------------


_MESSAGE_STOP = event({"type": "message_stop"}, "message_stop")


def _stop_reason(
    finish_reason: str | None, text_tail: str, stops: tuple[str, ...], refused: bool
) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` (and ``stop_sequence``) for the container's ``finish_reason``.

    Which stop sequence ended the text is known only where the container leaves it in (TGI, LMI do); vLLM
    takes it out, and such a stop reads as ``end_turn``.
    """
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason in ("tool_calls", "function_call"):
        return "tool_use", None
    if refused or finish_reason == "content_filter":
        return "refusal", None
    for stop in stops:
        if text_tail.endswith(stop):
            return "stop_sequence", stop
    return "end_turn", None


def _usage(usage: Usage | None) -> dict[str, Any]:
    """Anthropic's usage, whose two counts its types declare integers (strict clients, the Vercel provider among
    them, refuse a null): what the container counted, 0 for a count it has not given (yet: message_start goes
    out before vLLM reports the prompt's count, which message_delta then carries)."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    return {"input_tokens": usage.prompt_tokens or 0, "output_tokens": usage.completion_tokens}


Block = Literal["text", "thinking", "tool_use"]


class MessagesEncoder:
    """The events of one streamed message (see the module docstring for their order)."""

    def __init__(
        self,
        *,
        model: str,
        stop_sequences: tuple[str, ...] = (),
        pad_bytes: int = 0,
        id: str | None = None,
        show_thinking: bool = True,
    ) -> None:
        # SSE_PAD_BYTES as on the OpenAI routes: a comment after each delta's events, which the SDKs skip.
        self._padding = padding(pad_bytes)
        self.model = model
        self.show_thinking = show_thinking  # thinking.display "omitted": the thoughts are left out
        self.id = id if id is not None else new_id("msg_")
        self.stops = stop_sequences
        self._tail_chars = max((len(s) for s in stop_sequences), default=0)
        self.tail = ""
        self.usage: Usage | None = None
        self.started = False
        self.block: Block | None = None
        self.index = -1  # of the open (or last) content block
        self.tool_index: Any = None  # the container's index of the call whose block is open
        self.tool_id: str | None = None  # and its id, where the container gave one
        self.finish_reason: str | None = None
        self.refused = False
        # The text_delta event of the open text block, cut where its text goes.
        self._text_event: tuple[bytes, bytes] = (b"", b"")

    def encode(self, delta: Delta) -> bytes:
        if self.block == "text" and is_text_only(delta):
            # Most deltas are text and nothing else: the open block's event with the text put in.
            if delta.usage is not None:
                self.usage = delta.usage
            if self._tail_chars:
                self.tail = (self.tail + delta.content)[-self._tail_chars :]
            head, tail = self._text_event
            return head + json_string(delta.content).encode() + tail
        data = self._encode(delta)
        return data + self._padding if data else data

    def _encode(self, delta: Delta) -> bytes:
        out: list[bytes] = []
        if delta.usage is not None:
            self.usage = delta.usage
        if not self.started:
            self.started = True
            message: dict[str, Any] = {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},  # counts come in message_delta
            }
            out.append(event({"type": "message_start", "message": message}, "message_start"))
        thought = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
        if thought and self.show_thinking:
            self._open(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": thought}))
        text = delta.content + (delta.refusal or "")
        self.refused = self.refused or bool(delta.refusal)
        if text:
            self._open(out, "text", {"type": "text", "text": ""})
            if self._tail_chars:
                self.tail = (self.tail + text)[-self._tail_chars :]
            out.append(self._delta({"type": "text_delta", "text": text}))
        for call in delta.tool_calls or ():
            function = call.get("function") or {}
            # A new call: a new index, or a new id (some servers repeat the call's id in each of its chunks).
            call_id = call.get("id")
            if (
                self.block != "tool_use"
                or call.get("index", self.tool_index) != self.tool_index
                or (call_id and call_id != self.tool_id)
            ):
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                    "name": function.get("name") or "",
                    "input": {},
                }
                self._open(out, "tool_use", block, force=True)
                self.tool_index, self.tool_id = call.get("index"), call_id
            arguments = function.get("arguments")
            if arguments:
                out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        if delta.finish_reason is not None:
            self._close(out)
            self.finish_reason = delta.finish_reason
        return b"".join(out)

    def _open(self, out: list[bytes], block: Block, start: dict[str, Any], *, force: bool = False) -> None:
        if self.block == block and not force:
            return
        self._close(out)
        self.index += 1
        self.block = block
        out.append(
            event({"type": "content_block_start", "index": self.index, "content_block": start}, "content_block_start")
        )
        if block == "text":
            # The event _delta() would write, byte for byte (test_messages checks), cut where the text goes.
            head = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,' % self.index
            self._text_event = (head + b'"delta":{"type":"text_delta","text":', b"}}\n\n" + self._padding)

    def _close(self, out: list[bytes]) -> None:
        if self.block is not None:
            out.append(event({"type": "content_block_stop", "index": self.index}, "content_block_stop"))
            self.block = None

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event({"type": "content_block_delta", "index": self.index, "delta": delta}, "content_block_delta")

    def done(self) -> bytes:
        """``message_delta`` (why it ended, the usage) and ``message_stop``."""
        out: list[bytes] = []
        self._close(out)
        reason, sequence = _stop_reason(self.finish_reason, self.tail, self.stops, self.refused)
        usage = _usage(self.usage)
        if self.usage is None or self.usage.prompt_tokens is None:
            del usage["input_tokens"]  # never counted: message_start's 0 stands (Anthropic's delta may omit it)
        out.append(
            event(
                {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage},
                "message_delta",
            )
        )
        out.append(_MESSAGE_STOP)
        return b"".join(out)

    def error(self, err: APIError) -> bytes:
        """Anthropic's ``error`` event; but a deadline ends the message as ``max_tokens`` does (the relay has
        encoded ``finish_reason: "length"`` just before), the reason in the log record."""
        if err.code == DEADLINE_EXCEEDED:
            return self.done()
        return event(error_object(err), "error")


def message_json(
    answer: Delta,
    *,
    model: str,
    stop_sequences: tuple[str, ...] = (),
    id: str | None = None,
    show_thinking: bool = True,
) -> bytes:
    """The whole ``message`` object for a whole answer: the same content blocks as the stream's."""
    content: list[dict[str, Any]] = []
    thought = answer.reasoning_content if answer.reasoning_content is not None else answer.reasoning
    if thought and show_thinking:
        content.append({"type": "thinking", "thinking": thought, "signature": ""})
    text = answer.content + (answer.refusal or "")
    if text:
        content.append({"type": "text", "text": text})
    for n, call in enumerate(answer.tool_calls or ()):
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            if answer.finish_reason != "length":
                raise APIError.upstream(
                    502, f"The model's arguments for tool call {n} are not JSON.", code="upstream_error"
                ) from None
            # max_tokens cut the call: no whole input to give; stop_reason says so (the stream has the fragments).
            arguments = {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                "name": function.get("name") or "",
                "input": arguments,
            }
        )
    reason, sequence = _stop_reason(answer.finish_reason, text, stop_sequences, bool(answer.refusal))
    return dumps(
        {
            "id": id if id is not None else new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": _usage(answer.usage),
        }
    )


# Anthropic's error type for each status (docs: "Errors"); any other 4xx is invalid_request_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_object(err: APIError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(err.status) or ("invalid_request_error" if err.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}
