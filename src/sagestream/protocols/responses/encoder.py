"""The stream is OpenAI's event sequence, one :class:`ResponsesEncoder` per answer over the same
:class:`~sagestream.delta.Delta` objects the chat encoder reads: ``response.created`` and
``response.in_progress`` go out in the first delta's write; each output item (``reasoning``, ``message``,
``function_call``) is added when its first fragment arrives, its text or argument fragments go out as they
came (one ``*.delta`` event per container fragment, never re-chunked), and it is closed (``*.done``,
``output_item.done``) when the next item starts or the answer ends. The done events repeat the whole
text, as the protocol asks: that text is kept, so this encoder's memory grows with the answer (bounded
by ``max_output_tokens``), not only with the longest line.

Built in parts: :mod:`.snapshot` (the response object and its snapshots), :mod:`.items` (the output items and
their events), :mod:`.events` (the sequence numbers); the stream's own state and its ends are here.

The end: ``response.completed`` with ``usage`` (the counts the container reported; ``null`` if none);
``response.incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` for ``finish_reason:
length`` and for the function's deadline (the chat route's ``length`` too), ``content_filter`` for
``content_filter``; after any other fault an ``error`` event and ``response.failed`` (invariant 6: no
``response.completed``).

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> from sagestream.protocols.responses import RESPONSES
    >>> parsed = RESPONSES.parse(b'{"input": "Hi"}', Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e"}))
    >>> encoder = ResponsesEncoder(parsed.original, model="m", id="resp_1", created_at=0)
    >>> [event.split(b"\\n")[0] for event in encoder.encode(Delta(content="Hi")).split(b"\\n\\n")[:-1]]
    [b'event: response.created', b'event: response.in_progress', b'event: response.output_item.added', \
b'event: response.content_part.added', b'event: response.output_text.delta']
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sagestream.delta import Delta, is_text_only
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.protocols._wire import dumps, json_string, new_id, padding
from sagestream.protocols.responses.events import EventSequence
from sagestream.protocols.responses.items import OutputItems, function_name, logprobs_of
from sagestream.protocols.responses.sealing import seal
from sagestream.protocols.responses.snapshot import (
    ResponseSnapshot,
    echo,
    ending,
    queued_response,
    response_object,
    wants_summary,
)

if TYPE_CHECKING:
    from sagestream.delta import Usage
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = ["ResponsesEncoder", "queued_response", "response_json"]


class ResponsesEncoder:
    """The SSE events of one streamed response (see the module's docstring for the sequence)."""

    def __init__(
        self,
        request: ResponseCreateRequest,
        *,
        model: str,
        pad_bytes: int = 0,
        id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.request = request
        self.model = model
        self.id = id if id is not None else new_id("resp_")
        self.created_at = created_at if created_at is not None else int(time.time())
        self.usage: Usage | None = None
        self.final: bytes | None = None  # the response object as the client last got it whole (not a failed one)
        self.failed: bytes | None = None  # the response object of response.failed, once it was written
        self._padding = padding(pad_bytes)
        self._events = EventSequence()
        self._response = ResponseSnapshot(request, model=model, id=self.id, created_at=self.created_at)
        self._items = OutputItems(request, self._response, self._events, self._padding)
        self._started = False
        self._finish: str | None = None

    def encode(self, delta: Delta) -> bytes:
        """The events for ``delta``; empty bytes if it carries nothing to send now."""
        items = self._items
        if items.text_event is not None and is_text_only(delta):
            # Most deltas are text while a message is open: the event is a template with its sequence number
            # and the text's JSON string put in, one string encoded instead of the whole event. One bytes %
            # is the cheapest way measured (callgrind) to put the number in: joins and concatenations cost more.
            if delta.usage is not None:
                self.usage = delta.usage
            items.text_parts.append(delta.content)
            events = self._events
            seq = events.seq
            events.seq = seq + 1
            return items.text_event % (json_string(delta.content).encode(), seq)
        return self._encode(delta)

    def _encode(self, delta: Delta) -> bytes:
        if delta.usage is not None:
            self.usage = delta.usage
        out = b""
        if not self._started:
            self._started = True
            snapshot = self._response.json("in_progress", self.usage)
            out = self._events.lifecycle("response.created", snapshot)
            out += self._events.lifecycle("response.in_progress", snapshot)
        items = self._items
        reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
        if reasoning:
            out += items.reasoning(reasoning)
        if delta.refusal:
            out += items.refusal(delta.refusal)
        if delta.content:
            out += items.text(delta.content, delta.logprobs)
        for call in delta.tool_calls or ():
            out += items.tool_fragment(call)
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
            status, _ = ending(delta.finish_reason)
            out += items.close(status)
        return out + self._padding if out else out

    def done(self) -> bytes:
        """``response.completed``, or ``response.incomplete`` when the answer was cut."""
        out = self._items.close("completed")
        status, reason = ending(self._finish)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        self.final = self._response.json(status, self.usage, incomplete=reason)
        return out + self._events.lifecycle(kind, self.final)

    def error(self, err: APIError) -> bytes:
        """After the first byte: the deadline as ``response.incomplete``; any other fault as OpenAI's ``error``
        event and ``response.failed``."""
        out = self._items.close("incomplete")
        if err.code == DEADLINE_EXCEEDED:
            # The relay closed the answer with finish_reason "length" first: what was written stays correct.
            self.final = self._response.json("incomplete", self.usage, incomplete="max_output_tokens")
            return out + self._events.lifecycle("response.incomplete", self.final)
        out += self._events.event("error", {"code": err.code, "message": err.message, "param": err.param})
        code = "rate_limit_exceeded" if err.status == 429 else "server_error"
        failed = self.failed = self._response.json("failed", self.usage, error={"code": code, "message": err.message})
        return out + self._events.lifecycle("response.failed", failed)

    @property
    def sequence(self) -> int:
        """The next event's ``sequence_number``: how many events were written."""
        return self._events.seq

    def snapshot(self, status: str) -> bytes:
        """The response object as it stands (its finished items), with ``status``."""
        return self._response.json(status, self.usage)


def response_json(
    answer: Delta,
    request: ResponseCreateRequest,
    *,
    model: str,
    id: str | None = None,
    created_at: int | None = None,
) -> bytes:
    """The whole ``response`` object of a non-streamed answer: the same items a stream would have built."""
    from sagestream.protocols.responses.request import namespaced_tools

    status, reason = ending(answer.finish_reason)
    item_status = status
    output: list[dict[str, Any]] = []
    reasoning = answer.reasoning_content if answer.reasoning_content is not None else answer.reasoning
    if reasoning:
        item: dict[str, Any] = {
            "id": new_id("rs_"),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": reasoning}] if wants_summary(request) else [],
            "content": [{"type": "reasoning_text", "text": reasoning}],
            "status": item_status,
        }
        if "reasoning.encrypted_content" in (request.include or ()):
            item["encrypted_content"] = seal(reasoning)
        output.append(item)
    if answer.refusal:
        refusal = {"type": "refusal", "refusal": answer.refusal}
        output.append(
            {"id": new_id("msg_"), "type": "message", "status": item_status, "role": "assistant", "content": [refusal]}
        )
    text = answer.content
    if text or not (answer.tool_calls or answer.refusal):
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if request.top_logprobs or "message.output_text.logprobs" in (request.include or ()):
            part["logprobs"] = logprobs_of(answer.logprobs)
        output.append(
            {"id": new_id("msg_"), "type": "message", "status": item_status, "role": "assistant", "content": [part]}
        )
    for call in answer.tool_calls or ():
        function = call.get("function") or {}
        output.append(
            {
                "id": new_id("fc_"),
                "type": "function_call",
                "status": item_status,
                "call_id": str(call.get("id") or new_id("call_")),
                **function_name(str(function.get("name") or ""), namespaced_tools(request)),
                "arguments": str(function.get("arguments") or ""),
            }
        )
    return dumps(
        response_object(
            id=id if id is not None else new_id("resp_"),
            created_at=created_at if created_at is not None else int(time.time()),
            model=model,
            echo=echo(request),
            status=status,
            output=output,
            usage=answer.usage,
            incomplete=reason,
        )
    )
