"""The HTTP side of an invocation, whatever front sent it: the request, the response's writer, and routes.

:class:`Request` is what the routes need of the event; :class:`Writer` starts the response with its first
chunk and writes each one; a :class:`Route` is one path (or, with ``prefix``, every path under it), its
methods and its handler, as in Starlette: an unknown path is a 404, a known path with the wrong method a 405
naming the allowed ones, and ``HEAD`` answers on every ``GET`` route as ``GET`` does, without the body.

Environment variables read: none.

Example::

    >>> request = Request.from_event({"rawPath": "/health", "requestContext": {"http": {"method": "get"}}})
    >>> request.method, request.path
    ('GET', '/health')
    >>> Route("/health", ("GET",), lambda app, call: None).methods
    ('GET', 'HEAD')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sagestream.errors import APIError
from sagestream.function_url import event_body

if TYPE_CHECKING:
    from sagestream.protocols._api import ClientAPI
    from sagestream.runtime import ResponseStream

__all__ = ["JSON_HEADERS", "SSE_HEADERS", "Request", "Route", "RouteHandler", "Routes", "Writer"]

SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
    "x-content-type-options": "nosniff",
}
JSON_HEADERS = {"content-type": "application/json", "x-content-type-options": "nosniff"}


class Request(msgspec.Struct, frozen=True):
    """What the routes need of a Function URL event (payload format 2.0).

    Read as the plain mapping it is: Powertools' event data class would cost the cold start its whole
    ``data_classes`` package (every event type AWS has, about a tenth of a bare boto3 client's import) for
    three fields.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    url_request_id: str | None = None
    caller: str | None = None  # the signing IAM principal, when the Function URL checked one
    query: Mapping[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        context = event.get("requestContext") or {}
        http = context.get("http") or {}
        iam = (context.get("authorizer") or {}).get("iam") or {}
        return cls(
            method=str(http.get("method") or "GET").upper(),
            path=str(event.get("rawPath") or http.get("path") or "/"),
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            body=event_body(event),
            url_request_id=context.get("requestId"),
            caller=iam.get("userArn") or None,
            query={str(k): str(v) for k, v in (event.get("queryStringParameters") or {}).items()},
        )


class Writer:
    """The response: started with the first chunk (status and headers fixed then), each chunk one write.

    ``head`` answers a ``HEAD`` request: the response starts as it would for ``GET``, no body is written.
    """

    def __init__(self, stream: ResponseStream, request_id: str, *, head: bool = False) -> None:
        self.stream = stream
        self.request_id = request_id
        self.head = head
        # The route's client API sets its own error shape (Anthropic's on /v1/messages); OpenAI's otherwise.
        self.error_body: Callable[[APIError], bytes] = APIError.json_bytes
        # The headers that carry request_id (the route's client API may add its own).
        self.id_headers: tuple[str, ...] = ("x-request-id",)

    @property
    def started(self) -> bool:
        return bool(self.stream.started)

    def write(self, data: bytes, status: int = 200, headers: Mapping[str, str] = JSON_HEADERS) -> None:
        if not data:
            return
        if not self.stream.started:
            self.stream.start(status, {**headers, **dict.fromkeys(self.id_headers, self.request_id)})
        if not self.head:
            self.stream.write(data)

    def json(self, payload: Any, status: int = 200) -> None:
        self.write(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(), status)

    def error(self, err: APIError) -> None:
        """An error before the first byte: its status, its headers, OpenAI's body."""
        self.write(self.error_body(err), err.status, {**JSON_HEADERS, **{k.lower(): v for k, v in err.headers.items()}})


# (the app, the call): the app's own types, which this module does not import.
RouteHandler = Callable[[Any, Any], None]


class Route(msgspec.Struct, frozen=True):
    """One path, or with ``prefix`` every path below it: the methods it answers (``HEAD`` with every ``GET``;
    every method for a prefix route, whose handler decides), its handler, whether it needs a key, and the
    client API whose error shape and id headers its answers take (OpenAI's when ``None``)."""

    path: str
    methods: tuple[str, ...]
    handler: RouteHandler
    keyed: bool = False
    api: ClientAPI | None = None
    prefix: bool = False

    def __post_init__(self) -> None:
        if "GET" in self.methods and "HEAD" not in self.methods:
            msgspec.structs.force_setattr(self, "methods", (*self.methods, "HEAD"))


class Routes:
    """The route table: a path's own route, else the longest prefix route above it, else none (a 404).

    >>> routes = Routes([Route("/v1/messages", ("POST",), print), Route("/v1/messages", (), print, prefix=True)])
    >>> routes.match("/v1/messages").prefix, routes.match("/v1/messages/batches").prefix, routes.match("/x")
    (False, True, None)
    """

    def __init__(self, routes: Iterable[Route]) -> None:
        self.exact: dict[str, Route] = {}
        self.prefixes: list[Route] = []
        for route in routes:
            if route.prefix:
                self.prefixes.append(route)
            else:
                self.exact[route.path] = route
        self.prefixes.sort(key=lambda route: len(route.path), reverse=True)

    def match(self, path: str) -> Route | None:
        route = self.exact.get(path)
        if route is not None:
            return route
        return next((r for r in self.prefixes if path.startswith(r.path + "/")), None)
