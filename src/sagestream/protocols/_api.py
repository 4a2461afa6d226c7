"""What every client protocol answers: :class:`ClientAPI`, the request it hands the pipeline (:class:`Parsed`),
and the :class:`StreamEncoder` its streamed answers are written by.

Every completion route runs the same pipeline (:meth:`sagestream.app.App.complete`): the body is read
into a *chat-shaped* request (:class:`~sagestream.protocols.openai.request.ChatCompletionRequest` or
:class:`~sagestream.protocols.openai.request.CompletionRequest`), which the dialects turn into the container's body and
whose deltas :func:`sagestream.relay.relay` decodes; what differs between APIs is only at the edges:

- :meth:`ClientAPI.parse`: the API's own request model, read and translated into the chat-shaped request
  (:class:`Parsed` keeps both: the encoder may need the original, to echo it);
- :meth:`ClientAPI.encoder`: the :class:`StreamEncoder` of a streamed answer;
- :meth:`ClientAPI.whole`: the bytes of a whole (non-streamed) answer;
- :meth:`ClientAPI.error_body`: an error before the first byte, in the API's error shape.

A new client protocol is one more package here, with its :class:`ClientAPI` and its routes, and one line in
:mod:`sagestream.protocols`; never a second relay loop.

Environment variables read: none.

Example::

    >>> err = in_client_terms(APIError.invalid_request("bad", param="user"), {"user": "metadata.user_id"})
    >>> err.param
    'metadata.user_id'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.http import Route

if TYPE_CHECKING:
    from sagestream.config import Config
    from sagestream.protocols.openai.request import ChatCompletionRequest, CompletionRequest

__all__ = ["App", "ClientAPI", "Completion", "Parsed", "StreamEncoder", "completion_route", "in_client_terms"]


class Parsed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A request as the pipeline needs it: the chat-shaped ``request`` the dialects speak, and the API's own
    ``original`` request model (the same object for the OpenAI routes)."""

    request: ChatCompletionRequest | CompletionRequest
    original: Any
    # The chat request's field paths under the names the client used ("user" -> "metadata.user_id"), for an
    # API whose fields the translation renamed: a refusal of the dialects must name what the client sent.
    names: Mapping[str, str] = msgspec.field(default_factory=dict)
    # Or, for an API whose renaming is more than a table of paths, the function that does it.
    rename: Callable[[APIError], APIError] | None = None
    # The fields the request carried that were accepted as documented no-ops (they cannot change what the model
    # generates: client metadata, ids, display and caching hints), by the client's own path; the invocation
    # record counts them (invariant 8), so an operator sees what clients send.
    noops: tuple[str, ...] = ()
    # Headers the answer carries because of this request (the Responses API's tools it did not offer the model).
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    # What to do with the answer once the client has it whole (its bytes): the Responses API stores it.
    finish: Callable[[bytes], None] | None = None
    # The request answered otherwise than by the upstream call here, given (app, call, this parse): the
    # Responses API's background request is queued and run by another invocation.
    # Returns None when it answered, or the request to run here instead (a background stream's).
    instead: Callable[[Any, Any, Any], Parsed | None] | None = None

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)

    def in_client_terms(self, err: APIError) -> APIError:
        """``err`` (about the chat-shaped request) naming the field as the client's API calls it."""
        return self.rename(err) if self.rename is not None else in_client_terms(err, self.names)


def in_client_terms(err: APIError, names: Mapping[str, str]) -> APIError:
    """``err``, its ``param`` (and the quoted name in its message) renamed by the longest path in ``names``.

    >>> names = {"user": "metadata.user_id", "messages.2": "messages.1.content.0"}
    >>> err = APIError.invalid_request("'messages.2.content' is bad.", param="messages.2.content")
    >>> err = in_client_terms(err, names)
    >>> err.param, err.message
    ('messages.1.content.0.content', "'messages.1.content.0.content' is bad.")
    """
    if not names or not err.param:
        return err
    parts = err.param.split(".")
    for n in range(len(parts), 0, -1):
        own = names.get(".".join(parts[:n]))
        if own is not None:
            param = ".".join([own, *parts[n:]])
            message = err.message.replace(f"'{err.param}'", f"'{param}'")
            return APIError(err.status, message, type=err.type, code=err.code, param=param, headers=err.headers)
    return err


class Completion(msgspec.Struct, forbid_unknown_fields=True):
    """One completion made ready for the pipeline (:meth:`sagestream.app.App.answer`; made by
    :func:`sagestream.prepare.completion`, or by a background run from its job): the model's configuration, the
    client's API and its parsed request, the upstream body, whether the answer streams, and what a whole answer's
    body is made by (the API's own, or a route's: ``count_tokens`` answers a count). The ids the upstream call
    carries and the quota it holds are the invocation's (``Call.ids``, ``Call.quota``)."""

    cfg: Config
    api: ClientAPI
    parsed: Parsed
    payload: bytes
    streamed: bool
    body: Callable[[Delta, Config], bytes] | None = None

    def whole_body(self, answer: Delta) -> bytes:
        if self.body is not None:
            return self.body(answer, self.cfg)
        return self.api.whole(answer, self.parsed, self.cfg)


class ClientAPI(Protocol):
    """One client API over the one pipeline."""

    @property
    def kind(self) -> str:
        """The log record's ``kind``: ``chat``, ``completion``, ... ."""
        ...

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, ...]:
        """Refuse (:class:`APIError`, 400) a header of the API's own whose value cannot be honoured; the names
        of the headers accepted as documented no-ops otherwise (counted in the record, as :attr:`Parsed.noops`)."""
        ...

    def parse(self, raw: bytes, cfg: Config, caller: str = "") -> Parsed:
        """The body read into the API's request model and translated; :class:`APIError` (400) naming the field
        at fault otherwise. ``caller``: who asks (API key, token subject or IAM principal), for what is theirs."""
        ...

    def encoder(self, parsed: Parsed, cfg: Config) -> StreamEncoder:
        """The encoder of one streamed answer to ``parsed``."""
        ...

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        """The body of a whole answer to ``parsed``; ``answer`` always has a ``finish_reason``."""
        ...

    def error_body(self, err: APIError) -> bytes:
        """``err`` as this API's error body, for an error before the first byte."""
        ...

    @property
    def id_headers(self) -> tuple[str, ...]:
        """The response headers that carry the request id, as this API's clients read it."""
        ...


class App(Protocol):
    """What a protocol's own route handlers ask of the app (:class:`sagestream.app.App`, which documents each):
    every completion goes through :meth:`complete` (a route's) or :meth:`answer` (a background run's)."""

    config: Config
    telemetry: Any

    def complete(
        self,
        call: Any,
        api: ClientAPI,
        *,
        parse: Callable[[bytes, Config], Parsed] | None = None,
        body: Callable[[Delta, Config], bytes] | None = None,
        max_tokens_default: int | None = None,
        counting: bool = False,
    ) -> None: ...

    def answer(self, call: Any, c: Any) -> Delta | None: ...

    def owner(self, call: Any) -> str: ...

    def settle_quota(self, record: Any, job: Any) -> None:
        """A background run's quota reservation (its job's ``quota``) settled to what ``record`` says was
        generated; ``record`` None: nothing was (a queued run cancelled or deleted)."""
        ...

    def deadline(self, call: Any) -> float: ...


def completion_route(path: str, api: ClientAPI) -> Route[ClientAPI]:
    """The route of a client API's completions: one keyed ``POST`` that runs the app's pipeline with ``api``."""

    def complete(app: App, call: Any) -> None:
        app.complete(call, api)

    return Route(path, ("POST",), complete, keyed=True, api=api)


class StreamEncoder(Protocol):
    """What :func:`sagestream.relay.relay` needs of a client API's streamed format: one encoder per response.

    Each method returns the bytes of one write (several SSE events may share it) and writes nothing.
    """

    def encode(self, delta: Delta) -> bytes:
        """The events for ``delta``; empty bytes if it carries nothing to send now."""
        ...

    def done(self) -> bytes:
        """The normal end of the stream (after the delta that carried the finish reason)."""
        ...

    def error(self, err: APIError) -> bytes:
        """The API's one error event after the first byte; nothing normal follows it (invariant 6)."""
        ...
