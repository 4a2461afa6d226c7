"""Deltas to OpenAI's streaming wire format: ``data: {chunk}\\n\\n`` events, then ``data: [DONE]\\n\\n``.

One :class:`ChunkEncoder` per response. It returns bytes and writes nothing, so each event is exactly
one write for the caller (and so one HTTP chunk: invariant 1 of docs/architecture.md).
The chunks are what OpenAI sends, field for field, for ``chat.completion.chunk`` and streamed ``text_completion``: the
first chat chunk carries ``delta.role = "assistant"``; with ``stream_options.include_usage`` every chunk
has ``"usage": null`` and a last chunk with ``choices: []`` carries the usage (sent only when the
container reported one: the relay does not count tokens itself; a prompt count it did not report is 0, since
OpenAI's types promise three integers). Every other field of the container's
delta (tool call fragments, ``reasoning_content`` / ``reasoning``, ``refusal``, logprobs) goes out as it
came, in the chunk of the delta that carried it; only ``id``, ``created`` and ``model`` are the relay's
own, one of each per response. :func:`completion_json` builds the non-streaming ``chat.completion`` /
``text_completion`` object. :func:`error_event` is the one SSE error event: an error after the first
byte, in OpenAI's shape, after which no ``[DONE]`` follows.

Most deltas carry text and nothing else: their event is a template (cut once per response from the
general path's own output) with the text's JSON string put in, twenty times faster than serialising the
whole chunk and byte for byte the same.

``pad_bytes`` (0, or at least :data:`MIN_PAD_BYTES`) puts an SSE comment of that many bytes after each
delta event. Clients ignore comments;
intermediaries that hold small writes back until some kilobytes have gathered pass them on at once.

Example::

    >>> import json
    >>> encoder = ChunkEncoder(model="m", kind="chat", include_usage=False, id="chatcmpl-1", created=0)
    >>> event = encoder.encode(Delta(content="Hé"))
    >>> event[:6], event[-2:], json.loads(event[6:])["choices"][0]["delta"]
    (b'data: ', b'\\n\\n', {'role': 'assistant', 'content': 'Hé'})
    >>> json.loads(encoder.encode(Delta(finish_reason="stop"))[6:])["choices"]
    [{'index': 0, 'delta': {}, 'logprobs': None, 'finish_reason': 'stop'}]
    >>> encoder.done()
    b'data: [DONE]\\n\\n'
"""

from __future__ import annotations

import time
from typing import Any, Literal

from sagestream.delta import Delta, Usage, is_text_only
from sagestream.errors import APIError
from sagestream.protocols._wire import dumps, error_event, event, json_string, new_id, padding

__all__ = ["DONE", "ChunkEncoder", "Kind", "completion_json", "error_event"]

Kind = Literal["chat", "completion"]

DONE = b"data: [DONE]\n\n"

# Stands for the text while the template is cut: a NUL, which JSON always escapes (\u0000).
_MARKER = "\x00"


def _usage(usage: Usage) -> dict[str, Any]:
    """OpenAI's usage object: its three counts are always integers, as OpenAI's types declare them (strict
    clients refuse a usage without one). A prompt count the container did not give (TGI and LMI report none)
    is 0, and the total then the completion's; docs/api.md says which containers count prompts.

    >>> _usage(Usage(None, 4, None))
    {'prompt_tokens': 0, 'completion_tokens': 4, 'total_tokens': 4}
    """
    prompt = usage.prompt_tokens or 0
    total = usage.total_tokens if usage.total_tokens is not None else prompt + usage.completion_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": total,
        **usage.details,
    }


def _delta_fields(delta: Delta) -> dict[str, Any]:
    """The delta's fields other than role and content, each as the container sent it."""
    fields: dict[str, Any] = {
        "reasoning_content": delta.reasoning_content,
        "reasoning": delta.reasoning,
        "refusal": delta.refusal,
        "tool_calls": delta.tool_calls,
    }
    return {**{k: v for k, v in fields.items() if v is not None}, **delta.extra}


def _new_id(kind: Kind) -> str:
    return new_id("chatcmpl-" if kind == "chat" else "cmpl-")


class ChunkEncoder:
    """The SSE events of one streamed answer."""

    def __init__(
        self,
        *,
        model: str,
        kind: Kind,
        include_usage: bool,
        pad_bytes: int = 0,
        id: str | None = None,
        created: int | None = None,
    ) -> None:
        if kind not in ("chat", "completion"):
            raise ValueError(f"kind must be 'chat' or 'completion', not {kind!r}")
        self.model = model
        self.kind: Kind = kind
        self.include_usage = include_usage
        self.id = id if id is not None else _new_id(kind)
        self.created = created if created is not None else int(time.time())
        self.usage: Usage | None = None
        # The container's, as its first delta brought it (vLLM's build); OpenAI's field, null when none came.
        self.system_fingerprint: str | None = None
        self._padding = padding(pad_bytes)
        self._started = False
        # Cut when the second delta needs it, after the first one was written: not on the way to the first token.
        self._text_event: tuple[bytes, bytes] | None = None
        self._text_cut = False

    def encode(self, delta: Delta) -> bytes:
        """The event for ``delta``; empty bytes if it carries nothing to send now (only usage, say)."""
        if self._started and is_text_only(delta):
            if not self._text_cut:
                self._text_event, self._text_cut = self._text_template(), True
            if self._text_event is not None:
                # Most deltas are text and nothing else: their event is the template with the text put in,
                # one JSON string encoded instead of the whole chunk (a twentieth of the time).
                if delta.usage is not None:
                    self.usage = delta.usage
                head, tail = self._text_event
                return head + json_string(delta.content).encode() + tail
        return self._encode(delta)

    def _encode(self, delta: Delta) -> bytes:
        """The general path: any delta, its chunk built as a dict and serialised whole."""
        if delta.system_fingerprint is not None and delta.system_fingerprint != self.system_fingerprint:
            self.system_fingerprint = delta.system_fingerprint
            self._text_cut = False  # the text template is cut again, with it
        if delta.usage is not None:
            # Kept for the last chunk: vLLM may report usage on every chunk, OpenAI reports it once.
            self.usage = delta.usage
        first = not self._started
        if self.kind == "chat":
            if not (first or delta.content or delta.finish_reason or delta.logprobs or _delta_fields(delta)):
                return b""
        elif not (delta.content or delta.finish_reason or delta.logprobs):
            return b""
        self._started = True
        return self._event_of(delta, first=first)

    def _event_of(self, delta: Delta, *, first: bool) -> bytes:
        if self.kind == "chat":
            # Only the first chunk names the role, whatever the container repeats.
            body: dict[str, Any] = {"role": "assistant", "content": delta.content} if first else {}
            if delta.content and not first:
                body["content"] = delta.content
            body.update(_delta_fields(delta))
            choice: dict[str, Any] = {"index": 0, "delta": body}
        else:
            choice = {"index": 0, "text": delta.content}
        choice["logprobs"] = delta.logprobs
        choice["finish_reason"] = delta.finish_reason
        return event(self._chunk([choice], None)) + self._padding

    def _text_template(self) -> tuple[bytes, bytes] | None:
        """The event of a text-only delta after the first, cut where its text goes. Made by the general
        path itself, so both give the same bytes; None if the cut is ambiguous (then every delta takes the
        general path)."""
        marker = dumps(_MARKER)
        event = self._event_of(Delta(content=_MARKER), first=False)
        if event.count(marker) != 1:
            return None
        head, tail = event.split(marker)
        return head, tail

    def done(self) -> bytes:
        """The end of a good stream: the usage chunk if asked for and known, then ``[DONE]``."""
        if self.include_usage and self.usage is not None:
            return event(self._chunk([], self.usage)) + DONE
        return DONE

    def error(self, err: APIError) -> bytes:
        """OpenAI's error shape as one ``data:`` event: :func:`error_event`."""
        return error_event(err)

    def _chunk(self, choices: list[dict[str, Any]], usage: Usage | None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.system_fingerprint,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = _usage(usage) if usage is not None else None
        return chunk


def completion_json(
    delta: Delta,
    *,
    model: str,
    kind: Kind,
    id: str | None = None,
    created: int | None = None,
) -> bytes:
    """The non-streaming answer (``chat.completion`` or ``text_completion``) for a whole-body delta.

    A container that gave no finish reason stopped on its own, so ``finish_reason`` is then ``stop``.
    The message keeps every field of the container's (tool calls, reasoning, refusal), and the choice
    its logprobs; usage the container did not report at all is ``null`` (OpenAI's ``usage`` is optional),
    and a prompt count it did not report is 0 (its counts are not).
    """
    choice: dict[str, Any] = {"index": 0}
    if kind == "chat":
        # OpenAI's message has content null when the model only called tools.
        content = None if delta.tool_calls and not delta.content else delta.content
        choice["message"] = {"role": "assistant", "content": content, "refusal": None, **_delta_fields(delta)}
    else:
        choice["text"] = delta.content
    choice["logprobs"] = delta.logprobs
    choice["finish_reason"] = delta.finish_reason or "stop"
    return dumps(
        {
            "id": id if id is not None else _new_id(kind),
            "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": created if created is not None else int(time.time()),
            "model": model,
            "system_fingerprint": delta.system_fingerprint,
            "choices": [choice],
            "usage": _usage(delta.usage) if delta.usage is not None else None,
        }
    )
