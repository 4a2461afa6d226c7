"""The HTTP side of an invocation, whatever front sent it: the request, the response's writer, and routes.

:class:`Request` is what the routes need of the event (a Function URL's payload 2.0 or an API Gateway REST
API's payload 1.0, read alike); :class:`Writer` starts the response with its first
chunk and writes each one; a :class:`Route` is one path (or, with ``prefix``, every path under it), its
methods and its handler, as in Starlette: an unknown path is a 404, a known path with the wrong method a 405
naming the allowed ones, and ``HEAD`` answers on every ``GET`` route as ``GET`` does, without the body.

Environment variables read: none.

Example::

    >>> request = Request.from_event({"rawPath": "/health", "requestContext": {"http": {"method": "get"}}})
    >>> request.method, request.path
    ('GET', '/health')
    >>> rest = Request.from_event({"httpMethod": "POST", "resource": "/{proxy+}", "path": "/prod-api/v1/models",
    ...                            "pathParameters": {"proxy": "v1/models"}})
    >>> rest.method, rest.path
    ('POST', '/v1/models')
    >>> Route("/health", ("GET",), lambda app, call: None).methods
    ('GET', 'HEAD')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from sagestream.errors import APIError
from sagestream.function_url import event_body

if TYPE_CHECKING:
    from sagestream.lambda_runtime import ResponseStream

__all__ = ["JSON_HEADERS", "SSE_HEADERS", "Request", "Route", "RouteHandler", "Routes", "Writer"]

SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
    "x-content-type-options": "nosniff",
}
JSON_HEADERS = {"content-type": "application/json", "x-content-type-options": "nosniff"}


class Request(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the routes need of the event, whichever front sent it: a Function URL's (payload format 2.0) or
    an API Gateway REST API's Lambda proxy integration (payload format 1.0, what a streaming REST front sends:
    AWS's "Set up a Lambda proxy integration with payload response streaming" says the input format is the
    proxy integration's own).

    Both read into the same fields the same way: header names lower-cased, a repeated header or query
    parameter one value joined with commas (as the Function URL joins them itself), the body as bytes.

    Read as the plain mapping it is: Powertools' event data class would cost the cold start its whole
    ``data_classes`` package (every event type AWS has, about a tenth of a bare boto3 client's import) for
    a few fields.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    url_request_id: str | None = None  # the front's own request id (the URL's or API Gateway's)
    # Who the front says called: the signing IAM principal (AWS_IAM on either front), or, behind a REST front
    # that checked an API key, ``apikey:<API Gateway's key id>`` (the key itself never reaches a log).
    caller: str | None = None
    query: Mapping[str, str] = msgspec.field(default_factory=dict)
    source_ip: str | None = None
    api_key_id: str | None = None  # API Gateway's id of the key it checked (REST front, AUTH_MODE=api_key)

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        # Payload 1.0 has httpMethod at the top and no "version" (API Gateway's REST events carry none). A 2.0
        # event says so: cargo-lambda's emulator sends one that holds a stray httpMethod ("GET") beside it.
        if event.get("version") != "2.0" and "httpMethod" in event:
            return _from_rest(event)
        return _from_url(event)


def _from_url(event: Mapping[str, Any]) -> Request:
    """A Function URL's event (payload format 2.0)."""
    context = event.get("requestContext") or {}
    http = context.get("http") or {}
    iam = (context.get("authorizer") or {}).get("iam") or {}
    return Request(
        method=str(http.get("method") or "GET").upper(),
        path=str(event.get("rawPath") or http.get("path") or "/"),
        headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
        body=event_body(event),
        url_request_id=context.get("requestId"),
        caller=iam.get("userArn") or None,
        query={str(k): str(v) for k, v in (event.get("queryStringParameters") or {}).items()},
        source_ip=http.get("sourceIp") or None,
    )


def _from_rest(event: Mapping[str, Any]) -> Request:
    """An API Gateway REST proxy event (payload format 1.0).

    The multi-value maps are read first: the single-value ones keep only the last of repeated values.
    """
    context = event.get("requestContext") or {}
    identity = context.get("identity") or {}
    key_id = identity.get("apiKeyId") or None
    return Request(
        method=str(event.get("httpMethod") or "GET").upper(),
        path=_rest_path(event),
        headers=_joined(event.get("multiValueHeaders"), event.get("headers"), lower=True),
        body=event_body(event),
        url_request_id=context.get("requestId"),
        caller=identity.get("userArn") or (f"apikey:{key_id}" if key_id else None),
        query=_joined(event.get("multiValueQueryStringParameters"), event.get("queryStringParameters")),
        source_ip=identity.get("sourceIp") or None,
        api_key_id=key_id,
    )


def _rest_path(event: Mapping[str, Any]) -> str:
    """The path under the API's root: the ``{proxy+}`` parameter where the greedy resource matched, since the
    event's ``path`` may carry a custom domain's base path mapping too (Mangum's ``api_gateway_base_path``
    exists to strip it); the root resource is ``/``."""
    proxy = (event.get("pathParameters") or {}).get("proxy")
    if event.get("resource") == "/{proxy+}" and proxy is not None:
        return "/" + str(proxy).lstrip("/")
    if event.get("resource") == "/":
        return "/"
    return str(event.get("path") or "/")


def _joined(
    multi: Mapping[str, Any] | None, single: Mapping[str, Any] | None, *, lower: bool = False
) -> dict[str, str]:
    """One value per name: a multi-value map's values joined with commas, else the single-value map's."""
    out: dict[str, str] = {}
    for source, many in ((single or {}, False), (multi or {}, True)):  # multi last: it wins where both have a name
        for name, value in source.items():
            key = str(name).lower() if lower else str(name)
            out[key] = ",".join(str(v) for v in value) if many and isinstance(value, list) else str(value)
    return out


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
        # What the invocation learnt of its answer before it started, for every response (x-sagestream-target).
        self.extra_headers: dict[str, str] = {}

    @property
    def started(self) -> bool:
        return bool(self.stream.started)

    def write(self, data: bytes, status: int = 200, headers: Mapping[str, str] = JSON_HEADERS) -> None:
        if not data:
            return
        if not self.stream.started:
            ids = dict.fromkeys(self.id_headers, self.request_id)
            self.stream.start(status, {**headers, **self.extra_headers, **ids})
        if not self.head:
            self.stream.write(data)

    def json(self, payload: Any, status: int = 200) -> None:
        self.write(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(), status)

    def error(self, err: APIError) -> None:
        """An error before the first byte: its status, its headers, OpenAI's body."""
        self.write(self.error_body(err), err.status, {**JSON_HEADERS, **{k.lower(): v for k, v in err.headers.items()}})


# (the app, the call): the app's own types, which this module does not import.
RouteHandler = Callable[[Any, Any], None]
# The client API a route answers in (sagestream.protocols' ClientAPI): the protocols register routes that this
# module defines, so it names no protocol type and nothing here imports them back.
API = TypeVar("API", covariant=True)
T = TypeVar("T")


class Route(msgspec.Struct, Generic[API], frozen=True, forbid_unknown_fields=True):
    """One path, or with ``prefix`` every path below it: the methods it answers (``HEAD`` with every ``GET``;
    every method for a prefix route, whose handler decides), its handler, whether it needs a key, and the
    client API whose error shape and id headers its answers take (OpenAI's when ``None``)."""

    path: str
    methods: tuple[str, ...]
    handler: RouteHandler
    keyed: bool = False
    api: API | None = None
    prefix: bool = False

    def __post_init__(self) -> None:
        if "GET" in self.methods and "HEAD" not in self.methods:
            msgspec.structs.force_setattr(self, "methods", (*self.methods, "HEAD"))


class Routes(Generic[T]):
    """The route table: a path's own route, else the longest prefix route above it, else none (a 404).

    >>> routes = Routes([Route("/v1/messages", ("POST",), print), Route("/v1/messages", (), print, prefix=True)])
    >>> routes.match("/v1/messages").prefix, routes.match("/v1/messages/batches").prefix, routes.match("/x")
    (False, True, None)
    """

    def __init__(self, routes: Iterable[Route[T]]) -> None:
        self.exact: dict[str, Route[T]] = {}
        self.prefixes: list[Route[T]] = []
        for route in routes:
            if route.prefix:
                self.prefixes.append(route)
            else:
                self.exact[route.path] = route
        self.prefixes.sort(key=lambda route: len(route.path), reverse=True)

    def match(self, path: str) -> Route[T] | None:
        route = self.exact.get(path)
        if route is not None:
            return route
        return next((r for r in self.prefixes if path.startswith(r.path + "/")), None)
