"""The one error shape every client sees: OpenAI's ``{"error": {"message", "type", "param", "code"}}``.

Before the first byte of a response an :class:`APIError` becomes an HTTP status with that body; after it,
the same body travels as one SSE ``data:`` event and the stream ends without ``[DONE]``.

Example::

    >>> err = APIError.invalid_request("messages must not be empty", param="messages")
    >>> err.status, err.body()["error"]["type"]
    (400, 'invalid_request_error')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The code of the function's own time limit: counted as a deadline stop, not as the endpoint failing.
DEADLINE_EXCEEDED = "deadline_exceeded"
# The most of a container's own error message a client is shown (and the log keeps).
MAX_MESSAGE_CHARS = 1000


class APIError(Exception):
    """An error with a client-visible status, type, code and (optionally) the request field at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def json_bytes(self) -> bytes:
        return json.dumps(self.body(), separators=(",", ":")).encode()

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.message!r}, type={self.type!r}, code={self.code!r})"

    # The constructors below name the situations the relay meets; each fixes status, type and code.

    @classmethod
    def invalid_request(
        cls, message: str, *, param: str | None = None, code: str | None = None, status: int = 400
    ) -> APIError:
        return cls(status, message, type="invalid_request_error", param=param, code=code)

    @classmethod
    def not_found(cls, message: str, *, code: str = "not_found", param: str | None = None) -> APIError:
        return cls(404, message, type="invalid_request_error", code=code, param=param)

    @classmethod
    def method_not_allowed(cls, method: str, path: str, allowed: str) -> APIError:
        return cls(
            405,
            f"Method {method} is not allowed on {path}; use {allowed}.",
            code="method_not_allowed",
            headers={"Allow": allowed},
        )

    @classmethod
    def unauthorized(cls, message: str = "Missing or invalid API key.") -> APIError:
        return cls(
            401,
            message,
            type="authentication_error",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )

    @classmethod
    def upstream(cls, status: int, message: str, *, code: str, headers: Mapping[str, str] | None = None) -> APIError:
        """An error of the SageMaker endpoint or of the path to it."""
        kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
        return cls(status, message, type=kind, code=code, headers=headers)

    @classmethod
    def internal(cls, message: str = "The server had an error while processing your request.") -> APIError:
        return cls(500, message, type="server_error", code="internal_error")
