"""The Function URL's side of the wire: the event Lambda hands the function, and the response prelude.

The REST front's event (API Gateway's payload 1.0) is built here too (:func:`build_rest_event`): its
streaming integration frames the response with the same prelude.

One home for both (invariant 5 of docs/architecture.md): the streaming runtime encodes
the prelude, the local Function URL front (``sagestream_local``) builds events and decodes preludes, and
both use this module.

A streamed Function URL response body (``application/vnd.awslambda.http-integration-response``) is a
JSON prelude ``{"statusCode", "headers", "cookies"}``, then eight NUL bytes, then the response body.

Example::

    >>> data = encode_prelude(200, {"content-type": "text/plain"}) + b"hello"
    >>> decoder = PreludeDecoder()
    >>> prelude = decoder.feed(data)
    >>> prelude.status, prelude.headers["content-type"], decoder.rest
    (200, 'text/plain', b'hello')
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

CONTENT_TYPE = "application/vnd.awslambda.http-integration-response"
SEPARATOR = b"\x00" * 8
# Lambda refuses a Function URL request whose payload is over 6 MB with 413 before the function runs.
MAX_REQUEST_BYTES = 6 * 1024 * 1024
# The prelude is small; a stream that has not shown the separator by then is not a prelude.
MAX_PRELUDE_BYTES = 64 * 1024

_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\x00")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_TEXT_SUFFIXES = ("+json", "+xml")


class PreludeError(ValueError):
    """Bytes that are not a valid response prelude, or values that would break one."""


class PreludeTooLarge(PreludeError):
    """No separator within :data:`MAX_PRELUDE_BYTES`."""


class BadHeader(PreludeError):
    """A header name or value that would inject or break headers (CR, LF or NUL, or an empty name)."""


@dataclass(frozen=True, slots=True)
class Prelude:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    cookies: tuple[str, ...] = ()


def _check_header_text(text: str, what: str) -> str:
    if any(c in text for c in _FORBIDDEN_IN_HEADERS):
        raise BadHeader(f"{what} contains CR, LF or NUL: {text!r}")
    return text


def encode_prelude(status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> bytes:
    """The prelude and its separator, refusing anything that could inject a header or a cookie.

    >>> encode_prelude(404, {"content-type": "application/json"})
    b'{"statusCode":404,"headers":{"content-type":"application/json"},"cookies":[]}\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
    """
    if not 100 <= status <= 599:
        raise PreludeError(f"status {status} is not an HTTP status")
    checked: dict[str, str] = {}
    for name, value in headers.items():
        if not name or ":" in name or " " in name:
            raise BadHeader(f"invalid header name {name!r}")
        if name.lower() == "set-cookie":
            raise BadHeader("cookies travel in the prelude's cookies, not as a set-cookie header")
        checked[_check_header_text(name, "header name")] = _check_header_text(str(value), f"header {name}")
    cookie_list = [_check_header_text(c, "cookie") for c in cookies]
    # ``cookies`` is always present, empty or not: Lambda accepts either, but a strict reader (cargo-lambda's
    # emulator deserializes it as a required field) answers 500 to a prelude without it.
    prelude: dict[str, Any] = {"statusCode": status, "headers": checked, "cookies": cookie_list}
    return json.dumps(prelude, separators=(",", ":")).encode() + SEPARATOR


class PreludeDecoder:
    """Finds the prelude at the head of a streamed response, however the bytes are chunked.

    ``feed`` returns ``None`` until the separator has arrived, then the :class:`Prelude`; the body bytes
    that came with it are in ``rest``.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.rest = b""

    def feed(self, data: bytes) -> Prelude | None:
        searched_from = max(0, len(self._buffer) - len(SEPARATOR) + 1)
        self._buffer += data
        at = self._buffer.find(SEPARATOR, searched_from)
        if at < 0:
            if len(self._buffer) > MAX_PRELUDE_BYTES:
                raise PreludeTooLarge(f"no prelude separator in the first {MAX_PRELUDE_BYTES} bytes")
            return None
        head, self.rest = bytes(self._buffer[:at]), bytes(self._buffer[at + len(SEPARATOR) :])
        self._buffer.clear()
        return decode_prelude(head)


def decode_prelude(head: bytes) -> Prelude:
    try:
        raw = json.loads(head)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PreludeError(f"prelude is not JSON: {e}") from e
    if not isinstance(raw, dict):
        raise PreludeError("prelude is not a JSON object")
    status = raw.get("statusCode", 200)
    headers = raw.get("headers") or {}
    cookies = raw.get("cookies") or []
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise PreludeError(f"statusCode {status!r} is not an HTTP status")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise PreludeError("headers must be an object of strings")
    if not isinstance(cookies, list) or not all(isinstance(c, str) for c in cookies):
        raise PreludeError("cookies must be a list of strings")
    for name, value in headers.items():
        _check_header_text(name, "header name")
        _check_header_text(value, f"header {name}")
    for cookie in cookies:
        _check_header_text(cookie, "cookie")
    return Prelude(status, dict(headers), tuple(cookies))


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value: no parameters, lower case.

    >>> media_type("Application/JSON; charset=utf-8")
    'application/json'
    """
    return content_type.split(";", 1)[0].strip().lower()


def _is_text(content_type: str) -> bool:
    media = media_type(content_type)
    return (
        media.startswith(_TEXT_TYPES)
        or media.endswith(_TEXT_SUFFIXES)
        or media == ("application/x-www-form-urlencoded")
    )


def build_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str,
    protocol: str = "HTTP/1.1",
    domain: str = "localhost",
    now: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """A Function URL event, payload format 2.0, as Lambda builds it from one HTTP request.

    Header names are lower-cased and repeated headers joined with commas; ``Cookie`` headers become the
    ``cookies`` list; a body that is not text travels base64-encoded with ``isBase64Encoded``.
    """
    now = time.time() if now is None else now
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    query: dict[str, str] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        query[key] = f"{query[key]},{value}" if key in query else value
    moment = datetime.fromtimestamp(now, UTC)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": joined,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": domain.split(".", 1)[0],
            "domainName": domain,
            "domainPrefix": domain.split(".", 1)[0],
            "http": {
                "method": method.upper(),
                "path": raw_path,
                "protocol": protocol,
                "sourceIp": source_ip,
                "userAgent": joined.get("user-agent", ""),
            },
            "requestId": request_id or str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": moment.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if body:
        event["body"], event["isBase64Encoded"] = _encoded(body, joined.get("content-type", ""))
    return event


def build_rest_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str,
    stage: str = "api",
    domain: str = "localhost",
    api_key: str | None = None,
    api_key_id: str | None = None,
    now: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """An API Gateway REST API's Lambda proxy event (payload format 1.0) for a ``{proxy+}`` resource with the
    stage mapped at the domain's root, as AWS's guide ("Input format of a Lambda function for proxy
    integration") documents it.

    Header names keep their case; ``headers`` and ``queryStringParameters`` carry the last value of a
    repeated name, ``multiValueHeaders`` and ``multiValueQueryStringParameters`` every value; maps with nothing
    in them are ``null``. A body that is not text travels base64-encoded (API Gateway does so for the binary
    media types it is told of; the template's streaming integration passes bodies through).
    """
    now = time.time() if now is None else now
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers:
        multi_headers.setdefault(name, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        multi_query.setdefault(key, []).append(value)
    lower = {k.lower(): v[-1] for k, v in multi_headers.items()}
    moment = datetime.fromtimestamp(now, UTC)
    request_id = request_id or str(uuid.uuid4())
    root = raw_path in ("", "/")
    event: dict[str, Any] = {
        "resource": "/" if root else "/{proxy+}",
        "path": raw_path or "/",
        "httpMethod": method.upper(),
        "headers": {k: v[-1] for k, v in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": None if root else {"proxy": raw_path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "local0",
            "resourcePath": "/" if root else "/{proxy+}",
            "httpMethod": method.upper(),
            "extendedRequestId": request_id,
            "requestTime": moment.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "path": f"/{stage}{raw_path or '/'}",
            "accountId": "123456789012",
            "protocol": "HTTP/1.1",
            "stage": stage,
            "domainPrefix": domain.split(".", 1)[0],
            "requestTimeEpoch": int(now * 1000),
            "requestId": request_id,
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": None,
                "cognitoIdentityId": None,
                "caller": None,
                "sourceIp": source_ip,
                "principalOrgId": None,
                "accessKey": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": None,
                "userAgent": lower.get("user-agent", ""),
                "user": None,
                "apiKey": api_key,
                "apiKeyId": api_key_id,
            },
            "domainName": domain,
            "apiId": domain.split(".", 1)[0],
        },
        "body": None,
        "isBase64Encoded": False,
    }
    if body:
        event["body"], event["isBase64Encoded"] = _encoded(body, lower.get("content-type", ""))
    return event


def _encoded(body: bytes, content_type: str) -> tuple[str, bool]:
    """An event's body and its base64 flag: text as it is, anything else (or text that is not UTF-8) base64."""
    if _is_text(content_type):
        try:
            return body.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), True


class BadEvent(ValueError):
    """An event no front builds (only a direct Invoke can send one): a field of the wrong type, a body that is not
    what its ``isBase64Encoded`` says. The message names the field."""


def event_body(event: Mapping[str, Any]) -> bytes:
    """The request body of a Function URL or REST event as bytes, undoing the base64 Lambda may have applied;
    :class:`BadEvent` for a body no front sends.

    >>> event_body({"body": "aGk=", "isBase64Encoded": True}), event_body({"body": None})
    (b'hi', b'')
    >>> event_body({"body": "hi", "isBase64Encoded": "false"})
    Traceback (most recent call last):
    ...
    sagestream.function_url.BadEvent: isBase64Encoded must be true or false, not a str
    """
    body, encoded = event.get("body"), event.get("isBase64Encoded", False)
    if not isinstance(encoded, bool) and encoded is not None:
        raise BadEvent(f"isBase64Encoded must be true or false, not a {type(encoded).__name__}")
    if body is None or body == "":
        return b""
    if not isinstance(body, str):
        raise BadEvent(f"body must be a string or null, not {type(body).__name__}")
    if encoded:
        try:
            return base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or text that is not ASCII
            raise BadEvent("body is not base64, as its isBase64Encoded says it is") from None
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which JSON's escapes can carry and UTF-8 cannot
        raise BadEvent("body is not text that UTF-8 can carry") from None
