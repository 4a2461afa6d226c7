"""Small handlers the runtime tests run in real runtime processes (``_HANDLER=tests.handlers.NAME``).

Each is driven by its event's body, a JSON object, so one process can be asked for different behaviour.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from sagestream.function_url import event_body
from sagestream.lambda_runtime import ClientDisconnected, LambdaContext, ResponseStream, trace_id

raise_at_import = os.environ.get("TEST_HANDLER_IMPORT_ERROR")
if raise_at_import:
    raise RuntimeError(raise_at_import)

# SnapStart: two hooks of each kind that note their names in this file, one of them failing when asked to.
SNAPSTART_LOG = os.environ.get("TEST_SNAPSTART_LOG")
if SNAPSTART_LOG:
    from snapshot_restore_py import register_after_restore, register_before_snapshot

    def _note(what: str) -> None:
        if what == os.environ.get("TEST_SNAPSTART_FAIL"):
            raise RuntimeError(f"the {what} hook failed")
        with open(SNAPSTART_LOG, "a") as log:
            log.write(what + "\n")

    for number in (1, 2):
        register_before_snapshot(_note, f"before-{number}")
        register_after_restore(_note, f"after-{number}")
    random.seed(42)  # the state a snapshot would carry into every environment restored from it


def _spec(event: dict[str, Any]) -> dict[str, Any]:
    body = event_body(event)
    return json.loads(body) if body else {}


def echo(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """Answers with what it was given: the event, the context and the trace id, as JSON."""
    stream.start(200, {"content-type": "application/json", "x-echo": "1"}, cookies=["a=1; Path=/", "b=2"])
    stream.write(
        json.dumps(
            {
                "event": event,
                "context": {
                    "aws_request_id": context.aws_request_id,
                    "function_name": context.function_name,
                    "function_version": context.function_version,
                    "invoked_function_arn": context.invoked_function_arn,
                    "memory_limit_in_mb": context.memory_limit_in_mb,
                    "log_group_name": context.log_group_name,
                    "log_stream_name": context.log_stream_name,
                    "remaining_ms": context.get_remaining_time_in_millis(),
                },
                "trace_id": os.environ.get("_X_AMZN_TRACE_ID"),
                "runtime_trace_id": trace_id(),
                "pid": os.getpid(),
            }
        )
    )


def paced(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """``{"writes": N, "interval_ms": T, "size": B, "tag": S}``: N writes of B bytes, T ms apart."""
    spec = _spec(event)
    tag = str(spec.get("tag", "x"))
    stream.start(200, {"content-type": "text/plain"})
    for i in range(int(spec.get("writes", 10))):
        if i:
            time.sleep(float(spec.get("interval_ms", 10)) / 1000)
        head = f"{tag}:{i}:".encode()
        stream.write(head + b"." * max(0, int(spec.get("size", 100)) - len(head)))


def fails(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """``{"after": K}``: raises after K writes (K = 0: before the response starts)."""
    after = int(_spec(event).get("after", 0))
    if after:
        stream.start(200, {"content-type": "text/plain"})
        for i in range(after):
            stream.write(f"part {i}\n")
    raise ValueError("the handler failed on purpose")


def crashes(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """Ends the process abruptly, as a segfault or an out-of-memory kill would."""
    if _spec(event).get("write_first"):
        stream.start(200, {"content-type": "text/plain"})
        stream.write("about to crash\n")
    os._exit(3)


def sleeps(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """``{"seconds": S}``: sleeps, for the function timeout."""
    time.sleep(float(_spec(event).get("seconds", 60)))
    stream.start(200, {})
    stream.write("woke")


def until_gone(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """Writes every 10 ms until the client leaves, then reports (to stderr) that it noticed."""
    stream.start(200, {"content-type": "text/plain"})
    for i in range(3000):
        try:
            stream.write(f"tick {i}\n")
        except ClientDisconnected:
            marker = _spec(event).get("marker")
            if marker:
                with open(marker, "w") as f:
                    f.write(f"disconnected after {i}")
            return
        time.sleep(0.01)


def bad_header(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """Tries to inject a header through a value with CR LF."""
    stream.start(200, {"x-evil": "a\r\nSet-Cookie: pwned=1"})


def chosen(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """``{"handler": NAME, ...}``: the handler of this module called NAME, for runtimes taking several at once."""
    name = str(_spec(event).get("handler"))
    if name not in {"echo", "paced", "fails", "crashes"}:
        raise ValueError(f"no handler {name!r} to choose")
    globals()[name](event, stream, context)


def snapstart_state(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """Answers with what the SnapStart hooks noted, and the next number of Python's ``random``."""
    assert SNAPSTART_LOG
    with open(SNAPSTART_LOG) as log:
        noted = log.read().split()
    stream.start(200, {"content-type": "application/json"})
    stream.write(json.dumps({"noted": noted, "random": random.random()}))
