"""The response object of the Responses API, whole or as it stands while its answer streams.

What every ``response.*`` event carries and the stored answer is: its own fields (``id``, ``status``, ``output``
and the rest), the request's settings it repeats (serialised once per answer) and ``usage``.

Example::

    >>> ending("length"), ending("stop")
    (('incomplete', 'max_output_tokens'), ('completed', None))
    >>> usage_json(Usage(3, 4, 7))["output_tokens_details"]
    {'reasoning_tokens': 0}
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from sagestream.delta import Usage
from sagestream.protocols._wire import dumps

if TYPE_CHECKING:
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = ["ResponseSnapshot", "echo", "ending", "queued_response", "response_object", "usage_json", "wants_summary"]


def usage_json(usage: Usage | None) -> dict[str, Any] | None:
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


def _given(value: Any) -> Any:
    """``value`` without its null members, at every level: the settings a client gave."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items() if v is not None}
    return value


def echo(request: ResponseCreateRequest) -> dict[str, Any]:
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


def wants_summary(request: ResponseCreateRequest) -> bool:
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


def response_object(
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
    return {**head, **echo, "usage": usage_json(usage)}


# finish_reason → the response's status and incomplete_details.reason.
def ending(finish_reason: str | None) -> tuple[str, str | None]:
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


class ResponseSnapshot:
    """The response object of one streamed answer as it stands: its finished items, in output order.

    A finished item's text is kept once, as JSON, and put in where the item holds its marker: the done events
    and the final response repeat the whole text, which is serialised once.
    """

    def __init__(self, request: ResponseCreateRequest, *, model: str, id: str, created_at: int) -> None:
        self.id = id
        self.created_at = created_at
        self.model = model
        self.output: list[dict[str, Any]] = []  # the finished items, each text a marker
        self.texts: list[tuple[bytes, bytes]] = []  # (a marker as JSON, its text as JSON)
        self._echo = echo(request)
        self._echo_json: bytes | None = None

    def fill(self, data: bytes) -> bytes:
        """``data`` with each finished item's marker replaced by its text."""
        for marker, text in self.texts:
            data = data.replace(marker, text)
        return data

    def json(
        self,
        status: str,
        usage: Usage | None,
        *,
        error: dict[str, Any] | None = None,
        incomplete: str | None = None,
    ) -> bytes:
        """The response object as it stands, as JSON; the request's settings in it are serialised once."""
        if self._echo_json is None:
            self._echo_json = dumps(self._echo)[1:-1]
        head = _head(
            id=self.id,
            created_at=self.created_at,
            model=self.model,
            status=status,
            output=self.output,
            error=error,
            incomplete=incomplete,
        )
        return self.fill(dumps(head)[:-1] + b"," + self._echo_json + b',"usage":' + dumps(usage_json(usage)) + b"}")


def queued_response(request: ResponseCreateRequest, *, model: str, id: str, created_at: int) -> bytes:
    """The response object of a background request before its run starts: ``queued``, no output yet."""
    return dumps(
        response_object(id=id, created_at=created_at, model=model, echo=echo(request), status="queued", output=[])
    )
