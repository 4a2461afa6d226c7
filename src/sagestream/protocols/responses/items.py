"""The output items of a streamed response (``reasoning``, ``message``, a refusal, ``function_call``) and their events.

An item is added when its first fragment arrives, each fragment goes out as its ``*.delta`` event as it came
(never re-chunked), and the item is closed (``*.done``, ``output_item.done``) when another kind of item starts
or the answer ends; a closed item joins the response object (:class:`~.snapshot.ResponseSnapshot`).

Example::

    >>> logprobs_of({"content": [{"token": "Hi", "logprob": -0.1}]})
    [{'token': 'Hi', 'logprob': -0.1}]
    >>> function_name("ns__f", {"ns__f": ("ns", "f")}), function_name("g", {})
    ({'name': 'f', 'namespace': 'ns'}, {'name': 'g'})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from sagestream.protocols._wire import dumps, json_string, new_id
from sagestream.protocols.responses.events import EventSequence
from sagestream.protocols.responses.sealing import seal
from sagestream.protocols.responses.snapshot import ResponseSnapshot, wants_summary

if TYPE_CHECKING:
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = ["OutputItem", "OutputItems", "function_name", "logprobs_of"]


def function_name(chat_name: str, namespaced: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """A function_call's ``name``, and its ``namespace`` when the function came from a namespace tool."""
    if chat_name in namespaced:
        namespace, name = namespaced[chat_name]
        return {"name": name, "namespace": namespace}
    return {"name": chat_name}


def logprobs_of(delta_logprobs: dict[str, Any] | None) -> list[Any]:
    """Chat's logprobs content entries have the Responses shape already (token, logprob, bytes, top_logprobs)."""
    if not delta_logprobs:
        return []
    content = delta_logprobs.get("content")
    return list(content) if isinstance(content, list) else []


class OutputItem(msgspec.Struct, forbid_unknown_fields=True):
    """One output item while it is streamed."""

    kind: Literal["message", "refusal", "reasoning", "function_call"]  # a refusal is a message with a refusal part
    id: str
    output_index: int
    parts: list[str]  # its text or argument fragments, for the done events
    call_id: str = ""
    name: str = ""
    tool_index: int | None = None
    logprobs: list[Any] | None = None


class OutputItems:
    """The items of one streamed response: the one open now, its events, and each one's close."""

    def __init__(
        self, request: ResponseCreateRequest, response: ResponseSnapshot, events: EventSequence, pad: bytes
    ) -> None:
        from sagestream.protocols.responses.request import namespaced_tools  # loaded by the request's parse already

        self._response = response
        self._events = events
        self._padding = pad
        self._namespaced = namespaced_tools(request)
        self.open: OutputItem | None = None
        self.with_logprobs = bool(request.top_logprobs or "message.output_text.logprobs" in (request.include or ()))
        self._sealed_reasoning = "reasoning.encrypted_content" in (request.include or ())
        # reasoning.summary asked for: the reasoning also goes out as the item's summary (the whole text: no
        # container writes a summary), for the clients that read only summaries (the Vercel provider, LangChain).
        self._summaries = wants_summary(request)
        # While a message is open: its text-delta event with %s for the text and %d for the sequence number,
        # and the list its text goes to (the encoder's path for a text-only delta).
        self.text_event: bytes | None = None
        self.text_parts: list[str] = []

    def _switch(self, kind: Literal["message", "refusal", "reasoning"], prefix: str) -> tuple[OutputItem, bytes]:
        """The open item if it is of ``kind``, else a new one of that kind (the open one closed first)."""
        if self.open is not None and self.open.kind == kind:
            return self.open, b""
        out = self.close("completed")
        item = OutputItem(kind, new_id(prefix), self._next_index(), [], logprobs=[] if kind == "message" else None)
        return item, out + self._start(item)

    def reasoning(self, text: str) -> bytes:
        item, out = self._switch("reasoning", "rs_")
        item.parts.append(text)
        where = {"item_id": item.id, "output_index": item.output_index}
        out += self._events.event("response.reasoning_text.delta", {**where, "content_index": 0, "delta": text})
        if self._summaries:
            out += self._events.event(
                "response.reasoning_summary_text.delta", {**where, "summary_index": 0, "delta": text}
            )
        return out

    def refusal(self, text: str) -> bytes:
        item, out = self._switch("refusal", "msg_")
        item.parts.append(text)
        return out + self._events.event(
            "response.refusal.delta",
            {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "delta": text},
        )

    def text(self, text: str, delta_logprobs: dict[str, Any] | None) -> bytes:
        item, out = self._switch("message", "msg_")
        item.parts.append(text)
        logprobs = logprobs_of(delta_logprobs)
        if item.logprobs is not None:
            item.logprobs.extend(logprobs)
        where = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        return out + self._events.event("response.output_text.delta", {**where, "delta": text, "logprobs": logprobs})

    def _item_json(self, item: OutputItem, status: str, text: str) -> dict[str, Any]:
        if item.kind == "message":
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
            if self.with_logprobs:
                part["logprobs"] = item.logprobs or []
            return {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": [part]}
        if item.kind == "refusal":
            part = {"type": "refusal", "refusal": text}
            return {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": [part]}
        if item.kind == "reasoning":
            reasoning: dict[str, Any] = {
                "id": item.id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": text}] if self._summaries and text else [],
                "content": [{"type": "reasoning_text", "text": text}],
                "status": status,
            }
            if self._sealed_reasoning:
                reasoning["encrypted_content"] = None if status == "in_progress" else "\x00sealed" + item.id
            return reasoning
        return {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            **function_name(item.name, self._namespaced),
            "arguments": text,
        }

    def _start(self, item: OutputItem) -> bytes:
        self.open = item
        added = self._item_json(item, "in_progress", "")
        if item.kind != "function_call":
            added["content"] = []  # its part is added by the next event, as OpenAI does
        out = self._events.event("response.output_item.added", {"output_index": item.output_index, "item": added})
        if item.kind == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            if self.with_logprobs:
                part["logprobs"] = []
            out += self._events.event(
                "response.content_part.added",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "part": part},
            )
            if not self.with_logprobs:
                self.text_event = (
                    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"'
                    + item.id.encode()
                    + b'","output_index":'
                    + str(item.output_index).encode()
                    + b',"content_index":0,"delta":%s,"logprobs":[],"sequence_number":%d}\n\n'
                    + self._padding.replace(b"%", b"%%")
                )
                self.text_parts = item.parts
        elif item.kind == "refusal":
            out += self._events.event(
                "response.content_part.added",
                {
                    "item_id": item.id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "part": {"type": "refusal", "refusal": ""},
                },
            )
        elif item.kind == "reasoning":
            where = {"item_id": item.id, "output_index": item.output_index}
            if self._summaries:
                out += self._events.event(
                    "response.reasoning_summary_part.added",
                    {**where, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
                )
            out += self._events.event(
                "response.content_part.added",
                {**where, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}},
            )
        return out

    def close(self, status: str) -> bytes:
        item = self.open
        if item is None:
            return b""
        self.open = None
        self.text_event = None
        where = {"item_id": item.id, "output_index": item.output_index}
        marker = "\x00" + item.id  # a NUL (escaped in JSON) and a random id: never in the answer by chance
        whole = "".join(item.parts)
        text_json = json_string(whole).encode()
        self._response.texts.append((dumps(marker), text_json))
        if item.kind == "reasoning" and self._sealed_reasoning:
            self._response.texts.append((dumps("\x00sealed" + item.id), dumps(seal(whole))))
        done = self._item_json(item, status, marker)
        self._response.output.append(done)
        if item.kind == "message" and not self.with_logprobs:
            return self._message_done(item, status, text_json)
        if item.kind == "message":
            text: dict[str, Any] = {**where, "content_index": 0, "text": done["content"][0]["text"]}
            text["logprobs"] = item.logprobs or []
            out = self._events.event("response.output_text.done", text)
            out += self._events.event(
                "response.content_part.done", {**where, "content_index": 0, "part": done["content"][0]}
            )
        elif item.kind == "refusal":
            part = done["content"][0]
            out = self._events.event("response.refusal.done", {**where, "content_index": 0, "refusal": part["refusal"]})
            out += self._events.event("response.content_part.done", {**where, "content_index": 0, "part": part})
        elif item.kind == "reasoning":
            part = done["content"][0]
            out = self._events.event(
                "response.reasoning_text.done", {**where, "content_index": 0, "text": part["text"]}
            )
            out += self._events.event("response.content_part.done", {**where, "content_index": 0, "part": part})
            if self._summaries:
                summary = {"type": "summary_text", "text": part["text"]}
                out += self._events.event(
                    "response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": part["text"]}
                )
                out += self._events.event(
                    "response.reasoning_summary_part.done", {**where, "summary_index": 0, "part": summary}
                )
        else:
            out = self._events.event(
                "response.function_call_arguments.done",
                {**where, "name": done["name"], "arguments": done["arguments"]},
            )
        out += self._events.event("response.output_item.done", {"output_index": item.output_index, "item": done})
        return self._response.fill(out)

    def _message_done(self, item: OutputItem, status: str, text_json: bytes) -> bytes:
        """The three events that close a message item, written around its text's JSON: the end of every text
        answer, and the longest events of the response (each repeats the whole text)."""
        seq = self._events.take(3)
        item_id = b'"' + item.id.encode() + b'"'
        where = b'"item_id":' + item_id + b',"output_index":' + str(item.output_index).encode() + b',"content_index":0'
        part = b'{"type":"output_text","text":' + text_json + b',"annotations":[]}'
        return (
            b'event: response.output_text.done\ndata: {"type":"response.output_text.done",'
            + where
            + b',"text":'
            + text_json
            + b',"logprobs":[],"sequence_number":'
            + str(seq).encode()
            + b'}\n\nevent: response.content_part.done\ndata: {"type":"response.content_part.done",'
            + where
            + b',"part":'
            + part
            + b',"sequence_number":'
            + str(seq + 1).encode()
            + b'}\n\nevent: response.output_item.done\ndata: {"type":"response.output_item.done","output_index":'
            + str(item.output_index).encode()
            + b',"item":{"id":'
            + item_id
            + b',"type":"message","status":"'
            + status.encode()
            + b'","role":"assistant","content":['
            + part
            + b']},"sequence_number":'
            + str(seq + 2).encode()
            + b"}\n\n"
        )

    def _next_index(self) -> int:
        return len(self._response.output) + (self.open is not None)

    def tool_fragment(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self.open
        if item is None or item.kind != "function_call" or item.tool_index != index:
            out += self.close("completed")
            call_id = call.get("id") or new_id("call_")
            item = OutputItem(
                "function_call",
                new_id("fc_"),
                self._next_index(),
                [],
                call_id=str(call_id),
                name=str(function.get("name") or ""),
                tool_index=index,
            )
            out += self._start(item)
        arguments = function.get("arguments")
        if arguments:
            item.parts.append(arguments)
            out += self._events.event(
                "response.function_call_arguments.delta",
                {"item_id": item.id, "output_index": item.output_index, "delta": arguments},
            )
        return out
