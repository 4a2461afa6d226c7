"""The local stand-ins take a burst of connections at once, as an environment with K invocation loops makes.

socketserver listens with a backlog of 5. With K streams starting together, the runtime's K ``/response``
connections (and its K calls to the endpoint) arrive in one burst while the accepting thread waits for the
GIL; the kernel drops the SYNs beyond the backlog and each of those clients waits a whole second for its
retry before its first byte. Measured with 16-64 streams: first deltas about 1,000 ms late. Here no
thread accepts at all, so every connection must complete its handshake in the kernel's queue alone.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from sagestream_local import function_url, runtime_api
from sagestream_local.endpoint import server as endpoint_server

BURST = 64  # the largest K the bench runs (bench/many.py)


SERVERS: dict[str, Callable[[], Any]] = {
    "runtime api": lambda: runtime_api._RuntimeAPIServer(("127.0.0.1", 0), runtime_api._RuntimeAPIHandler),
    "endpoint": lambda: endpoint_server._Server(("127.0.0.1", 0), endpoint=None),  # type: ignore[arg-type]
    "function url": lambda: function_url._FrontServer(("127.0.0.1", 0), BaseHTTPRequestHandler),
}


@pytest.mark.parametrize("name", list(SERVERS))
def test_a_burst_of_connections_completes_without_an_accept(name: str) -> None:
    server = SERVERS[name]()
    with ExitStack() as stack:
        stack.callback(server.server_close)
        port = server.server_address[1]
        connected = 0
        for _ in range(BURST):
            client = stack.enter_context(socket.socket())
            client.settimeout(0.5)  # a dropped SYN is retried after 1 s: a connect waiting that long failed
            try:
                client.connect(("127.0.0.1", port))
                connected += 1
            except TimeoutError:
                pass
        assert connected == BURST, f"{name}: {connected} of {BURST} connections completed"
