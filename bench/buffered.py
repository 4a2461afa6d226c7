"""The ``buffered`` peer: sagestream's own relay, with the whole answer collected before the response starts.

This is the common tutorial shape (a Lambda that returns the finished body) built from the same code, so
the only difference the benchmark sees is the buffering: ``handler`` runs :data:`sagestream.app.handler`
against a stream that keeps every write, then starts the real response and sends it all in one write.
The benchmark runs it in real runtime processes behind the local Function URL
(``_HANDLER=bench.buffered.handler``), exactly like the ``sagestream`` peer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sagestream.app import handler as relay
from sagestream.lambda_runtime import LambdaContext, ResponseStream


class BufferedStream:
    """A :class:`~sagestream.lambda_runtime.ResponseStream` that only remembers what it was given."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.cookies: list[str] = []
        self.parts: list[bytes] = []

    @property
    def started(self) -> bool:
        return self.status is not None

    def start(self, status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> None:
        self.status, self.headers, self.cookies = status, dict(headers), list(cookies)

    def write(self, data: bytes | str) -> None:
        self.parts.append(data.encode() if isinstance(data, str) else bytes(data))

    def close(self) -> None:
        pass


def handler(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    buffered = BufferedStream()
    relay(event, buffered, context)
    if buffered.status is not None:
        stream.start(buffered.status, buffered.headers, buffered.cookies)
        stream.write(b"".join(buffered.parts))
