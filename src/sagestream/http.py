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
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from sagestream.errors import APIError
from sagestream.function_url import BadEvent, event_body
from sagestream.lambda_runtime import ClientDisconnected

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

    Read with msgspec into the few fields it needs, their types checked: Powertools' event data class would
    cost the cold start its whole ``data_classes`` package (every event type AWS has, about a tenth of a bare
    boto3 client's import) for a few fields, and its parser models pydantic's.
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

    # A field of the event that no front would send (a direct Invoke's): the 400 its route answers with, before
    # anything else (``App.dispatch``). The request then holds what could be read: its method and path, no more.
    malformed: APIError | None = None

    @classmethod
    def internal(cls, event: Mapping[str, Any]) -> Request:
        """One of the function's own events (a background run's), as the frame and the record see it."""
        return cls(method="RUN", path=f"/{event.get('sagestream')}", headers={}, body=b"")

    @classmethod
    def from_event(cls, event: Any) -> Request:
        """The request an event carries. An event no front builds (not an object, a field of the wrong type, a
        body that is not what ``isBase64Encoded`` says) is never an exception: it reads as a request of what
        could be read, its fault in ``malformed``, a 400 naming the field.

        >>> Request.from_event({"rawPath": "/v1/messages", "headers": ["a"]}).malformed.message[58:]
        'Expected `object | null`, got `array` - at `$.headers`.'
        """
        try:
            if not isinstance(event, Mapping):
                raise BadEvent(f"Expected `object`, got `{type(event).__name__}`")
            # Payload 1.0 has httpMethod at the top and no "version" (API Gateway's REST events carry none). A
            # 2.0 event says so: cargo-lambda's emulator sends one that holds a stray httpMethod ("GET") beside it.
            if event.get("version") != "2.0" and "httpMethod" in event:
                return _utf8(_from_rest(msgspec.convert(event, _RestEvent), event))
            return _utf8(_from_url(msgspec.convert(event, _UrlEvent), event))
        except (msgspec.ValidationError, BadEvent) as exc:
            return _malformed(event, str(exc))


def _utf8(request: Request) -> Request:
    """``request``, if every text it holds can be written as UTF-8 (to a log, an answer): JSON's escapes can carry
    a lone surrogate, which no front sends and no encoder writes. The fault never quotes the text (nor could it)."""
    texts = [request.method, request.path, request.url_request_id or "", request.caller or "", request.source_ip or ""]
    for pair in (*request.headers.items(), *request.query.items()):
        texts += pair
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        raise BadEvent("its path, method, a header, the query or its requestContext is not UTF-8 text") from None
    return request


def _malformed(event: Any, fault: str) -> Request:
    """The request of an event no front sends: its method and path where they can be read (the route's error
    shape follows the path), nothing else; ``malformed`` the 400 that names the fault."""
    readable: Mapping[str, Any] = event if isinstance(event, Mapping) else {}
    paths = (readable.get("rawPath"), readable.get("path"))
    path = next((str(p) for p in paths if _plain(p) and str(p).startswith("/")), "/")
    method = readable.get("httpMethod")
    return Request(
        method=str(method).upper() if _plain(method) else "POST",
        path=path,
        headers={},
        body=b"",
        malformed=APIError.invalid_request(
            f"The event is not one a Function URL or API Gateway sends: {fault}.", code="invalid_event"
        ),
    )


def _plain(value: Any) -> bool:
    """Whether ``value`` is text that UTF-8 can write."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# The events' fields the function reads, as the fronts send them (AWS's "Lambda function URL request and response
# payloads" and API Gateway's "Input format of a Lambda function for proxy integration"); anything else the event
# holds is not read. msgspec checks the types (strictly: "false" is no boolean), and names a wrong one by its path.
# These are the fronts' envelopes, not a client's request: they carry many fields of the front's own (time,
# domain, stage, protocol...) that say nothing of the answer, so unknown fields are allowed here, by name
# (forbid_unknown_fields=False); what the client sends, its body, is read strictly by its protocol's models.


class _Iam(msgspec.Struct, forbid_unknown_fields=False):
    userArn: str | None = None


class _Authorizer(msgspec.Struct, forbid_unknown_fields=False):
    iam: _Iam | None = None


class _UrlHttp(msgspec.Struct, forbid_unknown_fields=False):
    method: str | None = None
    path: str | None = None
    sourceIp: str | None = None


class _UrlContext(msgspec.Struct, forbid_unknown_fields=False):
    http: _UrlHttp | None = None
    requestId: str | None = None
    authorizer: _Authorizer | None = None


class _Body(msgspec.Struct, forbid_unknown_fields=False):
    body: str | None = None
    isBase64Encoded: bool | None = None


class _UrlEvent(_Body):
    rawPath: str | None = None
    headers: dict[str, str] | None = None
    queryStringParameters: dict[str, str] | None = None
    requestContext: _UrlContext | None = None


class _RestIdentity(msgspec.Struct, forbid_unknown_fields=False):
    userArn: str | None = None
    apiKeyId: str | None = None
    sourceIp: str | None = None


class _RestContext(msgspec.Struct, forbid_unknown_fields=False):
    requestId: str | None = None
    identity: _RestIdentity | None = None


class _RestEvent(_Body):
    httpMethod: str | None = None
    resource: str | None = None
    path: str | None = None
    pathParameters: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    multiValueHeaders: dict[str, list[str]] | None = None
    queryStringParameters: dict[str, str] | None = None
    multiValueQueryStringParameters: dict[str, list[str]] | None = None
    requestContext: _RestContext | None = None


def _from_url(event: _UrlEvent, raw: Mapping[str, Any]) -> Request:
    """A Function URL's event (payload format 2.0)."""
    context = event.requestContext or _UrlContext()
    http = context.http or _UrlHttp()
    iam = (context.authorizer or _Authorizer()).iam or _Iam()
    return Request(
        method=(http.method or "GET").upper(),
        path=event.rawPath or http.path or "/",
        headers={k.lower(): v for k, v in (event.headers or {}).items()},
        body=event_body(raw),
        url_request_id=context.requestId,
        caller=iam.userArn or None,
        query=dict(event.queryStringParameters or {}),
        source_ip=http.sourceIp or None,
    )


def _from_rest(event: _RestEvent, raw: Mapping[str, Any]) -> Request:
    """An API Gateway REST proxy event (payload format 1.0).

    The multi-value maps are read first: the single-value ones keep only the last of repeated values.
    """
    context = event.requestContext or _RestContext()
    identity = context.identity or _RestIdentity()
    key_id = identity.apiKeyId or None
    return Request(
        method=(event.httpMethod or "GET").upper(),
        path=_rest_path(event),
        headers=_joined(event.multiValueHeaders, event.headers, lower=True),
        body=event_body(raw),
        url_request_id=context.requestId,
        caller=identity.userArn or (f"apikey:{key_id}" if key_id else None),
        query=_joined(event.multiValueQueryStringParameters, event.queryStringParameters),
        source_ip=identity.sourceIp or None,
        api_key_id=key_id,
    )


def _rest_path(event: _RestEvent) -> str:
    """The path under the API's root: the ``{proxy+}`` parameter where the greedy resource matched, since the
    event's ``path`` may carry a custom domain's base path mapping too (Mangum's ``api_gateway_base_path``
    exists to strip it); the root resource is ``/``."""
    proxy = (event.pathParameters or {}).get("proxy")
    if event.resource == "/{proxy+}" and proxy is not None:
        return "/" + proxy.lstrip("/")
    if event.resource == "/":
        return "/"
    return event.path or "/"


def _joined(
    multi: Mapping[str, list[str]] | None, single: Mapping[str, str] | None, *, lower: bool = False
) -> dict[str, str]:
    """One value per name: a multi-value map's values joined with commas, else the single-value map's."""
    out: dict[str, str] = {}
    for name, value in (single or {}).items():
        out[name.lower() if lower else name] = value
    for name, values in (multi or {}).items():  # multi last: it wins where both have a name
        out[name.lower() if lower else name] = ",".join(values)
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
        # A writer whose answer goes on without its client (a background response's creator): a client that
        # leaves is noted (``gone``) and the rest of the answer is written to nobody, instead of ending it.
        self.outlives_client = False
        self.gone = False

    @property
    def started(self) -> bool:
        return bool(self.stream.started)

    def write(self, data: bytes, status: int = 200, headers: Mapping[str, str] = JSON_HEADERS) -> None:
        if not data or self.gone:
            return
        try:
            if not self.stream.started:
                ids = dict.fromkeys(self.id_headers, self.request_id)
                self.stream.start(status, {**headers, **self.extra_headers, **ids})
            if not self.head:
                self.stream.write(data)
        except ClientDisconnected:
            if not self.outlives_client:
                raise
            self.gone = True

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
    client API whose error shape and id headers its answers take (OpenAI's when ``None``). A segment written
    ``{name}`` is a path parameter, as in Starlette: it matches one segment, which the handler finds in
    ``call.params[name]``."""

    path: str
    methods: tuple[str, ...]
    handler: RouteHandler
    keyed: bool = False
    api: API | None = None
    prefix: bool = False

    def __post_init__(self) -> None:
        if "GET" in self.methods and "HEAD" not in self.methods:
            msgspec.structs.force_setattr(self, "methods", (*self.methods, "HEAD"))

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The path as a regular expression when it has parameters; None otherwise."""
        if "{" not in self.path:
            return None
        parts = [
            f"(?P<{segment[1:-1]}>[^/]+)" if _PARAM.fullmatch(segment) else re.escape(segment)
            for segment in self.path.split("/")
        ]
        return re.compile("/".join(parts))


_PARAM = re.compile(r"\{[a-z_][a-z0-9_]*\}")


class Routes(Generic[T]):
    """The route table: a path's own route, else the first route whose parameters match it, else the longest
    prefix route above it, else none (a 404).

    >>> routes = Routes([Route("/v1/messages", ("POST",), print), Route("/v1/messages", (), print, prefix=True)])
    >>> routes.match("/v1/messages").prefix, routes.match("/v1/messages/batches").prefix, routes.match("/x")
    (False, True, None)
    >>> Routes([Route("/v1/responses/{response_id}/cancel", ("POST",), print)]).resolve("/v1/responses/r1/cancel")[1]
    {'response_id': 'r1'}
    """

    def __init__(self, routes: Iterable[Route[T]]) -> None:
        self.exact: dict[str, Route[T]] = {}
        self.patterns: list[tuple[re.Pattern[str], Route[T]]] = []
        self.prefixes: list[Route[T]] = []
        for route in routes:
            pattern = route.pattern
            if route.prefix:
                self.prefixes.append(route)
            elif pattern is not None:
                self.patterns.append((pattern, route))
            else:
                self.exact[route.path] = route
        self.prefixes.sort(key=lambda route: len(route.path), reverse=True)

    def match(self, path: str) -> Route[T] | None:
        return self.resolve(path)[0]

    def resolve(self, path: str) -> tuple[Route[T] | None, dict[str, str]]:
        """The route of ``path`` and its path parameters."""
        route = self.exact.get(path)
        if route is not None:
            return route, {}
        for pattern, candidate in self.patterns:
            found = pattern.fullmatch(path)
            if found is not None:
                return candidate, found.groupdict()
        return next((r for r in self.prefixes if path.startswith(r.path + "/")), None), {}
