"""``python -m sagestream_local.invoke EVENT``: one Function URL event through one runtime process.

The Docker-free counterpart of ``sam local invoke``, and unlike it a streaming one: the response body goes
to stdout chunk by chunk as the runtime sends it, while the status line, the headers and any function
error go to stderr, so ``> body.txt`` keeps the body alone. The exit status is 1 when the function failed
(an unhandled exception, a crash, a timeout), whatever HTTP status it had answered; an HTTP error the
function chose to answer (a 400 for a malformed body, say) is not a failure of the invocation.

It runs on the same chain as ``make run`` (:class:`~sagestream_local.stack.LocalStack`, one runtime
process), so the upstream is chosen the same way: the simulated endpoint unless
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` or ``UPSTREAM=aws`` say otherwise, and ``UPSTREAM_FORMAT``,
``PROMPT_TEMPLATE`` and the rest of the configuration come from the environment.

Example::

    $ python -m sagestream_local.invoke events/chat-stream.json
    $ UPSTREAM_FORMAT=tgi python -m sagestream_local.invoke events/completion-native.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from sagestream.function_url import Prelude
from sagestream_local.runtime_api import FunctionError
from sagestream_local.stack import LocalStack


class StreamSink:
    """Body bytes to ``body`` as each chunk arrives (flushed, so a pipe sees them at once); the rest to ``log``."""

    def __init__(self, body: BinaryIO, log: TextIO) -> None:
        self._body = body
        self._log = log
        self.status: int | None = None
        self.error: FunctionError | None = None
        self.ended = threading.Event()

    def prelude(self, prelude: Prelude) -> None:
        self.status = prelude.status
        print(f"HTTP {prelude.status}", file=self._log)
        for name, value in prelude.headers.items():
            print(f"{name}: {value}", file=self._log)
        for cookie in prelude.cookies:
            print(f"set-cookie: {cookie}", file=self._log)
        print(file=self._log, flush=True)

    def chunk(self, data: bytes) -> None:
        self._body.write(data)
        self._body.flush()

    def end(self, error: FunctionError | None) -> None:
        self.error = error
        if error is not None:
            if self.status is None:
                # What a Function URL caller would get: Lambda answers 502 for a function that failed first.
                print("HTTP 502 (the function failed before its response began)", file=self._log)
            print(f"function error {error.error_type}: {json.dumps(error.payload)}", file=self._log, flush=True)
        self.ended.set()


def load_event(path: Path) -> dict[str, Any]:
    event = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(event, dict):
        raise ValueError(f"{path}: a Function URL event is a JSON object")
    return event


def invoke(event: dict[str, Any], *, timeout_s: float, body: BinaryIO, log: TextIO) -> FunctionError | None:
    """Run ``event`` through a fresh one-process local stack; return the function error, if there was one."""
    sink = StreamSink(body, log)
    with LocalStack(port=0, concurrency=1, timeout_s=timeout_s) as stack:
        assert stack.pool is not None
        invocation = stack.pool.submit(event, sink)
        # The pool ends an invocation that passes the function timeout, so this wait is only a backstop.
        if not invocation.wait(timeout_s + 15):
            started = sink.status is not None
            return FunctionError("Sandbox.Timedout", {"errorMessage": "the invocation never ended"}, started)
        sink.ended.wait(5)
    return sink.error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sagestream_local.invoke", description=__doc__.splitlines()[0])
    parser.add_argument("event", type=Path, help="a Function URL event file (payload 2.0): events/chat-stream.json")
    parser.add_argument("--timeout", type=float, default=300.0, help="function timeout in seconds (default 300)")
    args = parser.parse_args(argv)
    try:
        event = load_event(args.event)
    except (OSError, ValueError) as e:
        print(f"sagestream_local.invoke: {e}", file=sys.stderr)
        return 2
    # The runtime process inherits this process's stdout, and its log records (Powertools JSON) would land
    # in the body: keep the real stdout for the body alone and give fd 1 to stderr, as CloudWatch would.
    sys.stdout.flush()
    body = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    with body:
        error = invoke(event, timeout_s=args.timeout, body=body, log=sys.stderr)
    return 1 if error is not None else 0


if __name__ == "__main__":
    sys.exit(main())
