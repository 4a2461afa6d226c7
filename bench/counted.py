"""Marks for counting a process's work between two points: the function's runtime process, or a peer.

Loaded into the measured process (as ``_HANDLER=bench.counted.handler`` for the function, as
``python -m bench.counted PEER ...`` for a reader peer), it calls :func:`mark` at the points the figures
need. A mark notes its label and the process CPU (``time.process_time_ns``) in the file ``COUNTED_MARKS``
names, then calls ``getppid``: under ``valgrind --tool=callgrind --dump-before=getppid`` (see
:mod:`bench.instructions`) each mark dumps the instructions executed since the previous one, so dump *k*
holds the instructions of the interval that mark *k* ends. Without valgrind the same marks give CPU.

The function's marks, per invocation:

- ``event``: just before the runtime reads ``/next``'s answer, its request sent (waiting executes nothing:
  what follows is the answer's and the event's parse, routing, validation and the upstream body);
- ``call`` / ``called``: around botocore's ``invoke_endpoint_with_response_stream`` (its share is botocore's,
  the floor while the function calls SageMaker through botocore);
- ``write``: after each write of the response body returns (the first one ends the first token).

A peer's: ``delta`` after each content delta it hands on.
"""

from __future__ import annotations

import http.client
import os
import sys
import time
from typing import Any

_marks = None


def mark(label: str) -> None:
    global _marks
    if _marks is None:
        _marks = open(os.environ["COUNTED_MARKS"], "a", buffering=1)  # noqa: SIM115 - lives with the process
    _marks.write(f"{label} {time.process_time_ns()}\n")
    os.getppid()  # callgrind dumps here


def _install_function_marks() -> Any:
    from sagestream import app
    from sagestream import lambda_runtime as runtime
    from sagestream.lambda_runtime import client as runtime_client

    next_connection = getattr(runtime_client, "NextConnection", None)
    if next_connection is not None:  # this runtime reads /next's answer itself
        answer = next_connection.answer

        def counted_answer(self: Any) -> Any:
            mark("event")
            return answer(self)

        next_connection.answer = counted_answer
    getresponse = http.client.HTTPConnection.getresponse

    def counted_getresponse(self: http.client.HTTPConnection) -> http.client.HTTPResponse:
        if getattr(self, "_method", None) == "GET":
            mark("event")  # the /next poll: the only GET the runtime makes
        return getresponse(self)

    http.client.HTTPConnection.getresponse = counted_getresponse  # type: ignore[method-assign]

    client = app.handler.client
    call = client.invoke_endpoint_with_response_stream

    def counted_call(**kwargs: Any) -> Any:
        mark("call")
        try:
            return call(**kwargs)
        finally:
            mark("called")

    client.invoke_endpoint_with_response_stream = counted_call
    write = runtime.StreamingResponse.write

    def counted_write(self: runtime.StreamingResponse, data: bytes | str) -> None:
        write(self, data)
        mark("write")

    runtime.StreamingResponse.write = counted_write  # type: ignore[method-assign]
    return app.handler


def __getattr__(name: str) -> Any:
    """``handler``, the function with its marks installed, made when the runtime asks for it (``_HANDLER``):
    importing this module for :func:`mark` alone, as a peer does, loads nothing of the function."""
    if name != "handler":
        raise AttributeError(name)
    handler = globals()["handler"] = _install_function_marks()
    return handler


def main(argv: list[str]) -> int:
    """A reader peer (:mod:`bench.peers`' own code), marked after each content delta."""
    from bench import peers

    stamp = peers.Arrivals.stamp

    def counted_stamp(self: peers.Arrivals, count: int = 1) -> None:
        stamp(self, count)
        mark("delta")

    peers.Arrivals.stamp = counted_stamp  # type: ignore[method-assign]
    return peers.main(argv)


def intervals(marks_text: str) -> list[tuple[str, int]]:
    """(label, CPU ns since the previous mark) per mark, in order, from a marks file."""
    out: list[tuple[str, int]] = []
    last: int | None = None
    for line in marks_text.splitlines():
        label, ns = line.split()
        out.append((label, int(ns) - last if last is not None else 0))
        last = int(ns)
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
