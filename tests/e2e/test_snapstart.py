"""A restored SnapStart environment streams correctly on fresh connections: its runtime runs the restore
sequence against the local Runtime API's emulation, and the function's after-restore hook drops the
connection its client pooled before the snapshot (tests/snapstart_app.py primes one; on AWS its far end is
gone after a restore), so the first call after the restore opens a new one."""

from __future__ import annotations

import time
from typing import Any

from tests.client import request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import assert_good_stream, content_of, model_text

SNAPSTART = {"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start", "_HANDLER": "tests.snapstart_app.handler"}
ASK = {"messages": [{"role": "user", "content": "Hello after a restore"}], "stream": True}


def test_a_restored_environment_streams_on_a_fresh_connection(stack_for: GetStack) -> None:
    stack = stack_for(concurrency=1, **SNAPSTART)
    assert stack.endpoint is not None and stack.pool is not None
    environment = stack.pool.environments[0]
    deadline = time.monotonic() + 30
    while environment.snapshots < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert environment.snapshots == 1 and environment.restores == 0, "init (with its priming call) never ended"
    primed = [r for r in stack.endpoint.records if r.operation == "InvokeEndpoint"]
    assert len(primed) == 1, "the priming call before the snapshot"
    accepted = [0]
    server: Any = stack.endpoint._server
    process_request = server.process_request

    def count(connection: Any, address: Any) -> None:
        accepted[0] += 1
        process_request(connection, address)

    server.process_request = count
    try:
        resp = request(stack.url, "POST", "/v1/chat/completions", ASK)
        assert_good_stream(resp)
        assert content_of(resp) == model_text(stack)
        assert environment.restores == 1
        assert accepted[0] == 1, "the call after the restore reused the connection pooled before the snapshot"
        assert_good_stream(request(stack.url, "POST", "/v1/chat/completions", ASK))
        assert accepted[0] == 1, "after the restore, connections are pooled again"
    finally:
        server.process_request = process_request
