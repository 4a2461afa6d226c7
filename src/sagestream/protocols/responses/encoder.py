"""The stream is OpenAI's event sequence, one :class:`ResponsesEncoder` per answer over the same
:class:`~sagestream.delta.Delta` objects the chat encoder reads: ``response.created`` and
``response.in_progress`` go out in the first delta's write; each output item (``reasoning``, ``message``,
``function_call``) is added when its first fragment arrives, its text or argument fragments go out as they
came (one ``*.delta`` event per container fragment, never re-chunked), and it is closed (``*.done``,
``output_item.done``) when the next item starts or the answer ends. The done events repeat the whole
text, as the protocol asks: that text is kept, so this encoder's memory grows with the answer (bounded
by ``max_output_tokens``), not only with the longest line.

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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from sagestream.delta import Delta, Usage, is_text_only
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.protocols._wire import dumps, json_string, new_id, padding
from sagestream.protocols.responses.sealing import seal

if TYPE_CHECKING:
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = ["ResponsesEncoder", "queued_response", "response_json"]


# --- the answer ---------------------------------------------------------------------------------------------


def _usage(usage: Usage | None) -> dict[str, Any] | None:
    """The Responses usage object, every field OpenAI's types require (strict clients refuse one without them):
    the counts the container gave under OpenAI's names, 0 for one it did not (TGI and LMI count no prompt; few
    containers report cached or reasoning tokens); ``null`` when it reported no usage at all."""
    if usage is None:
        return None
    prompt = usage.prompt_tokens or 0
    prompt_details = usage.details.get("prompt_tokens_details")
    completion_details = usage.details.get("completion_tokens_details")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            **(prompt_details if isinstance(prompt_details, dict) else {}),
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            **(completion_details if isinstance(completion_details, dict) else {}),
        },
        "total_tokens": usage.total_tokens if usage.total_tokens is not None else prompt + usage.completion_tokens,
    }


def _function_name(chat_name: str, namespaced: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """A function_call's ``name``, and its ``namespace`` when the function came from a namespace tool."""
    if chat_name in namespaced:
        namespace, name = namespaced[chat_name]
        return {"name": name, "namespace": namespace}
    return {"name": chat_name}


def _given(value: Any) -> Any:
    """``value`` without its null members, at every level: the settings a client gave."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items() if v is not None}
    return value


def _echo(request: ResponseCreateRequest) -> dict[str, Any]:
    """The request's settings as the response object repeats them (OpenAI's defaults where not sent)."""
    text = _given(msgspec.to_builtins(request.text)) if request.text else {}
    text.setdefault("format", {"type": "text"})
    reasoning = _given(msgspec.to_builtins(request.reasoning)) if request.reasoning else {}
    return {
        "background": bool(getattr(request, "_background", False)),
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": dict(request.metadata or {}),
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": request._previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "service_tier": "default",  # there is one tier: the endpoint's
        "max_tool_calls": None,  # no hosted tools run here (a request's own is refused)
        "store": request._stored,  # kept only with a store, and unless the request said store: false
        # The sampling the request asked for, OpenAI's defaults where it asked none (the container's own
        # defaults, from the model's generation config, may differ: it is not asked).
        "temperature": 1.0 if request.temperature is None else request.temperature,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "text": text,
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": [_echoed_tool(tool) for tool in request.tools or ()],
        "top_logprobs": request.top_logprobs or 0,
        "top_p": 1.0 if request.top_p is None else request.top_p,
        "truncation": request.truncation or "disabled",
        "user": request.user,
    }


def _wants_summary(request: ResponseCreateRequest) -> bool:
    """Whether the request asked for reasoning summaries (``reasoning.summary``, or its older name)."""
    return bool(request.reasoning and (request.reasoning.summary or request.reasoning.generate_summary))


def _echoed_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the response repeats it: a function tool always says whether it is ``strict`` (false unless the
    client asked: the container is not made to enforce a schema it was not asked to)."""
    return {**tool, "strict": bool(tool.get("strict"))} if tool.get("type") == "function" else tool


def _head(
    *,
    id: str,
    created_at: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """A response object's own fields, before the request's settings it repeats and its usage."""
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "completed_at": int(time.time()) if status == "completed" else None,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "model": model,
        "output": output,
    }


def _response(
    *,
    id: str,
    created_at: int,
    model: str,
    echo: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    head = _head(
        id=id, created_at=created_at, model=model, status=status, output=output, error=error, incomplete=incomplete
    )
    return {**head, **echo, "usage": _usage(usage)}


# finish_reason → the response's status and incomplete_details.reason.
def _ending(finish_reason: str | None) -> tuple[str, str | None]:
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def _logprobs(delta_logprobs: dict[str, Any] | None) -> list[Any]:
    """Chat's logprobs content entries have the Responses shape already (token, logprob, bytes, top_logprobs)."""
    if not delta_logprobs:
        return []
    content = delta_logprobs.get("content")
    return list(content) if isinstance(content, list) else []


class _Item(msgspec.Struct, forbid_unknown_fields=True):
    """One output item while it is streamed."""

    kind: Literal["message", "refusal", "reasoning", "function_call"]  # a refusal is a message with a refusal part
    id: str
    output_index: int
    parts: list[str]  # its text or argument fragments, for the done events
    call_id: str = ""
    name: str = ""
    tool_index: int | None = None
    logprobs: list[Any] | None = None


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
        self._echo = _echo(request)
        from sagestream.protocols.responses.request import namespaced_tools  # loaded by the request's parse already

        self._namespaced = namespaced_tools(request)
        self._echo_json: bytes | None = None
        self._padding = padding(pad_bytes)
        self._seq = 0
        self._started = False
        self._open: _Item | None = None
        self._done: list[dict[str, Any]] = []  # the finished items, in output order, each text a marker
        # Each finished item's marker (as JSON) and its text (as JSON): the done events and the final response
        # repeat an item's whole text, which is serialised once and put in where its marker is.
        self._texts: list[tuple[bytes, bytes]] = []
        self._finish: str | None = None
        self._with_logprobs = bool(request.top_logprobs or "message.output_text.logprobs" in (request.include or ()))
        self._sealed_reasoning = "reasoning.encrypted_content" in (request.include or ())
        # reasoning.summary asked for: the reasoning also goes out as the item's summary (the whole text: no
        # container writes a summary), for the clients that read only summaries (the Vercel provider, LangChain).
        self._summaries = _wants_summary(request)
        # While a message is open: its text-delta event with %d for the sequence number and %s for the text,
        # and the list its text goes to.
        self._text_event: bytes | None = None
        self._text_parts: list[str] = []

    # -- events

    def _event(self, kind: str, body: dict[str, Any]) -> bytes:
        seq = self._seq
        self._seq += 1
        return (
            b"event: " + kind.encode() + b"\ndata: " + dumps({"type": kind, **body, "sequence_number": seq}) + b"\n\n"
        )

    def _fill(self, data: bytes) -> bytes:
        for marker, text in self._texts:
            data = data.replace(marker, text)
        return data

    def _snapshot(self, status: str, *, error: dict[str, Any] | None = None, incomplete: str | None = None) -> bytes:
        """The response object as it stands, as JSON; the request's settings in it are serialised once."""
        if self._echo_json is None:
            self._echo_json = dumps(self._echo)[1:-1]
        head = _head(
            id=self.id,
            created_at=self.created_at,
            model=self.model,
            status=status,
            output=self._done,
            error=error,
            incomplete=incomplete,
        )
        usage = dumps(_usage(self.usage))
        return self._fill(dumps(head)[:-1] + b"," + self._echo_json + b',"usage":' + usage + b"}")

    def _lifecycle(self, kind: str, response: bytes) -> bytes:
        """A ``response.*`` event around the response's JSON."""
        seq = self._seq
        self._seq += 1
        name = kind.encode()
        return (
            b"event: "
            + name
            + b'\ndata: {"type":"'
            + name
            + b'","response":'
            + response
            + b',"sequence_number":'
            + str(seq).encode()
            + b"}\n\n"
        )

    def _item_json(self, item: _Item, status: str, text: str) -> dict[str, Any]:
        if item.kind == "message":
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
            if self._with_logprobs:
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
            **_function_name(item.name, self._namespaced),
            "arguments": text,
        }

    def _open_item(self, item: _Item) -> bytes:
        self._open = item
        added = self._item_json(item, "in_progress", "")
        if item.kind != "function_call":
            added["content"] = []  # its part is added by the next event, as OpenAI does
        out = self._event("response.output_item.added", {"output_index": item.output_index, "item": added})
        if item.kind == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            if self._with_logprobs:
                part["logprobs"] = []
            out += self._event(
                "response.content_part.added",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "part": part},
            )
            if not self._with_logprobs:
                self._text_event = (
                    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"'
                    + item.id.encode()
                    + b'","output_index":'
                    + str(item.output_index).encode()
                    + b',"content_index":0,"delta":%s,"logprobs":[],"sequence_number":%d}\n\n'
                    + self._padding.replace(b"%", b"%%")
                )
                self._text_parts = item.parts
        elif item.kind == "refusal":
            out += self._event(
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
                out += self._event(
                    "response.reasoning_summary_part.added",
                    {**where, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
                )
            out += self._event(
                "response.content_part.added",
                {**where, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}},
            )
        return out

    def _close(self, status: str) -> bytes:
        item = self._open
        if item is None:
            return b""
        self._open = None
        self._text_event = None
        where = {"item_id": item.id, "output_index": item.output_index}
        marker = "\x00" + item.id  # a NUL (escaped in JSON) and a random id: never in the answer by chance
        whole = "".join(item.parts)
        text_json = json_string(whole).encode()
        self._texts.append((dumps(marker), text_json))
        if item.kind == "reasoning" and self._sealed_reasoning:
            self._texts.append((dumps("\x00sealed" + item.id), dumps(seal(whole))))
        done = self._item_json(item, status, marker)
        self._done.append(done)
        if item.kind == "message" and not self._with_logprobs:
            return self._message_done(item, status, text_json)
        if item.kind == "message":
            text: dict[str, Any] = {**where, "content_index": 0, "text": done["content"][0]["text"]}
            text["logprobs"] = item.logprobs or []
            out = self._event("response.output_text.done", text)
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": done["content"][0]})
        elif item.kind == "refusal":
            part = done["content"][0]
            out = self._event("response.refusal.done", {**where, "content_index": 0, "refusal": part["refusal"]})
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
        elif item.kind == "reasoning":
            part = done["content"][0]
            out = self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": part["text"]})
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
            if self._summaries:
                summary = {"type": "summary_text", "text": part["text"]}
                out += self._event(
                    "response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": part["text"]}
                )
                out += self._event(
                    "response.reasoning_summary_part.done", {**where, "summary_index": 0, "part": summary}
                )
        else:
            out = self._event(
                "response.function_call_arguments.done",
                {**where, "name": done["name"], "arguments": done["arguments"]},
            )
        out += self._event("response.output_item.done", {"output_index": item.output_index, "item": done})
        return self._fill(out)

    def _message_done(self, item: _Item, status: str, text_json: bytes) -> bytes:
        """The three events that close a message item, written around its text's JSON: the end of every text
        answer, and the longest events of the response (each repeats the whole text)."""
        seq = self._seq
        self._seq = seq + 3
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
        return len(self._done) + (self._open is not None)

    def encode(self, delta: Delta) -> bytes:
        """The events for ``delta``; empty bytes if it carries nothing to send now."""
        if self._text_event is not None and is_text_only(delta):
            # Most deltas are text while a message is open: the event is a template with its sequence number
            # and the text's JSON string put in, one string encoded instead of the whole event. One bytes %
            # is the cheapest way measured (callgrind) to put the number in: joins and concatenations cost more.
            if delta.usage is not None:
                self.usage = delta.usage
            self._text_parts.append(delta.content)
            seq = self._seq
            self._seq = seq + 1
            return self._text_event % (json_string(delta.content).encode(), seq)
        return self._encode(delta)

    def _encode(self, delta: Delta) -> bytes:
        if delta.usage is not None:
            self.usage = delta.usage
        out = b""
        if not self._started:
            self._started = True
            snapshot = self._snapshot("in_progress")
            out = self._lifecycle("response.created", snapshot) + self._lifecycle("response.in_progress", snapshot)
        reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
        if reasoning:
            if self._open is None or self._open.kind != "reasoning":
                out += self._close("completed")
                out += self._open_item(_Item("reasoning", new_id("rs_"), self._next_index(), []))
            item = self._open
            assert item is not None
            item.parts.append(reasoning)
            out += self._event(
                "response.reasoning_text.delta",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "delta": reasoning},
            )
            if self._summaries:
                out += self._event(
                    "response.reasoning_summary_text.delta",
                    {"item_id": item.id, "output_index": item.output_index, "summary_index": 0, "delta": reasoning},
                )
        if delta.refusal:
            if self._open is None or self._open.kind != "refusal":
                out += self._close("completed")
                out += self._open_item(_Item("refusal", new_id("msg_"), self._next_index(), []))
            item = self._open
            assert item is not None
            item.parts.append(delta.refusal)
            out += self._event(
                "response.refusal.delta",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "delta": delta.refusal},
            )
        text = delta.content
        if text:
            if self._open is None or self._open.kind != "message":
                out += self._close("completed")
                out += self._open_item(_Item("message", new_id("msg_"), self._next_index(), [], logprobs=[]))
            item = self._open
            assert item is not None
            item.parts.append(text)
            logprobs = _logprobs(delta.logprobs)
            if item.logprobs is not None:
                item.logprobs.extend(logprobs)
            out += self._event(
                "response.output_text.delta",
                {
                    "item_id": item.id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": logprobs,
                },
            )
        for call in delta.tool_calls or ():
            out += self._tool_fragment(call)
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
            status, _ = _ending(delta.finish_reason)
            out += self._close(status)
        return out + self._padding if out else out

    def _tool_fragment(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._open
        if item is None or item.kind != "function_call" or item.tool_index != index:
            out += self._close("completed")
            call_id = call.get("id") or new_id("call_")
            item = _Item(
                "function_call",
                new_id("fc_"),
                self._next_index(),
                [],
                call_id=str(call_id),
                name=str(function.get("name") or ""),
                tool_index=index,
            )
            out += self._open_item(item)
        arguments = function.get("arguments")
        if arguments:
            item.parts.append(arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                {"item_id": item.id, "output_index": item.output_index, "delta": arguments},
            )
        return out

    def done(self) -> bytes:
        """``response.completed``, or ``response.incomplete`` when the answer was cut."""
        out = self._close("completed")
        status, reason = _ending(self._finish)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        self.final = self._snapshot(status, incomplete=reason)
        return out + self._lifecycle(kind, self.final)

    def error(self, err: APIError) -> bytes:
        """After the first byte: the deadline as ``response.incomplete``; any other fault as OpenAI's ``error``
        event and ``response.failed``."""
        if err.code == DEADLINE_EXCEEDED:
            # The relay closed the answer with finish_reason "length" first: what was written stays correct.
            out = self._close("incomplete")
            self.final = self._snapshot("incomplete", incomplete="max_output_tokens")
            return out + self._lifecycle("response.incomplete", self.final)
        out = self._close("incomplete")
        out += self._event("error", {"code": err.code, "message": err.message, "param": err.param})
        code = "rate_limit_exceeded" if err.status == 429 else "server_error"
        failed = self.failed = self._snapshot("failed", error={"code": code, "message": err.message})
        return out + self._lifecycle("response.failed", failed)

    @property
    def sequence(self) -> int:
        """The next event's ``sequence_number``: how many events were written."""
        return self._seq

    def snapshot(self, status: str) -> bytes:
        """The response object as it stands (its finished items), with ``status``."""
        return self._snapshot(status)


def queued_response(request: ResponseCreateRequest, *, model: str, id: str, created_at: int) -> bytes:
    """The response object of a background request before its run starts: ``queued``, no output yet."""
    return dumps(_response(id=id, created_at=created_at, model=model, echo=_echo(request), status="queued", output=[]))


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

    status, reason = _ending(answer.finish_reason)
    item_status = status
    output: list[dict[str, Any]] = []
    reasoning = answer.reasoning_content if answer.reasoning_content is not None else answer.reasoning
    if reasoning:
        item: dict[str, Any] = {
            "id": new_id("rs_"),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": reasoning}] if _wants_summary(request) else [],
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
            part["logprobs"] = _logprobs(answer.logprobs)
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
                **_function_name(str(function.get("name") or ""), namespaced_tools(request)),
                "arguments": str(function.get("arguments") or ""),
            }
        )
    return dumps(
        _response(
            id=id if id is not None else new_id("resp_"),
            created_at=created_at if created_at is not None else int(time.time()),
            model=model,
            echo=_echo(request),
            status=status,
            output=output,
            usage=answer.usage,
            incomplete=reason,
        )
    )
