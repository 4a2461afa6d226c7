"""A slow service, for the tests and the bench: a TCP proxy on 127.0.0.1 in front of another loopback server (moto's
DynamoDB, say) that holds what the client sends for ``delay_s`` before passing it on (a table whose every answer
takes that long), and/or writes what comes back one byte every ``pace_s`` (a table that answers, but a byte a
second). Raw TCP, so it needs to know nothing of the protocol: botocore reaches it through its own
``AWS_ENDPOINT_URL_<SERVICE>`` setting, as it reaches the service behind it. Hand-written: the standard library's
socket is all it needs, and no proxy package slows a connection on purpose.

Example::

    >>> with SlowProxy("http://127.0.0.1:9", delay_s=0.5) as proxy:
    ...     proxy.url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import socket
import threading

__all__ = ["SlowProxy"]


class SlowProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target`` (``http://127.0.0.1:PORT``): each chunk a client sends is
    held ``delay_s`` before it is passed on; each byte of the answers is written ``pace_s`` after the one before.
    ``connections`` counts the connections it took."""

    def __init__(self, target: str, *, delay_s: float = 0.0, pace_s: float = 0.0) -> None:
        host, _, port = target.removeprefix("http://").rstrip("/").partition(":")
        self.target = (host, int(port))
        self.delay_s = delay_s
        self.pace_s = pace_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopped = threading.Event()
        self.connections = 0

    def __enter__(self) -> SlowProxy:
        threading.Thread(target=self._accept, name="slow-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if self.delay_s and self.stopped.wait(self.delay_s):  # the delay is the fault simulated
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def _answers(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self.pace_s:
                    sink.sendall(data)
                    continue
                for byte in data:
                    if self.stopped.wait(self.pace_s):
                        return
                    sink.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            sink.close()
