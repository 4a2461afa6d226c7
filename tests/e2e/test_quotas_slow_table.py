"""A quota table that answers a byte a second (moto's server behind a loopback proxy that trickles its answers): the
reserve is bounded in total, not per socket read, so the client gets a 503 ``quota_unavailable`` in the route's
shape within a few seconds, with the invocation's log record written, never the front's 502 after the function's
timeout; and a request the reserve refused this way is never served uncounted unless ``QUOTAS_UNAVAILABLE=open``
says so."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.stack import LocalStack
from tests.client import request
from tests.conftest import PYTHONPATH

ASK = [{"role": "user", "content": "Hi"}]


class Trickle:
    """A TCP proxy on 127.0.0.1 in front of ``target``: what a client sends passes at once; what comes back is
    written one byte every ``pace_s``, however much has arrived (a table that answers, but a byte a second)."""

    def __init__(self, target: str, pace_s: float = 1.0) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.pace_s = pace_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopped = threading.Event()
        self.connections = 0

    def __enter__(self) -> Trickle:
        threading.Thread(target=self._accept, daemon=True).start()
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
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pass, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._trickle, args=(upstream, client), daemon=True).start()

    def _pass(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def _trickle(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                for byte in data:
                    if self.stopped.wait(self.pace_s):  # the pace is the fault simulated, not a test's wait
                        return
                    sink.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            sink.close()


@pytest.fixture(scope="module")
def slow_table() -> Iterator[str]:
    with LocalDynamoDB() as db, Trickle(db.url) as trickle:
        yield trickle.url


def stack_over(table_url: str, log: Path, mode: str) -> LocalStack:
    env = {
        "PYTHONPATH": PYTHONPATH,
        "AUTH_MODE": "none",
        "QUOTAS": "tokens_per_minute=1000 tokens_per_day=100000",  # two windows: asked at once
        "QUOTAS_TABLE": "sagestream-quotas",
        "QUOTAS_UNAVAILABLE": mode,
        "AWS_ENDPOINT_URL_DYNAMODB": table_url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return LocalStack(
        port=0,
        concurrency=1,
        timeout_s=20.0,
        env=env,
        upstream="simulated",
        command=["sh", "-c", 'exec "$0" -m sagestream.lambda_runtime 2>&1', sys.executable],
        stdout=log.open("wb"),
    )


def records(log: Path) -> list[dict[str, object]]:
    lines = log.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if '"message":"invocation"' in line]


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_a_table_that_answers_a_byte_a_second_is_a_503_within_seconds(
    slow_table: str, tmp_path: Path, mode: str
) -> None:
    log = tmp_path / "runtime.log"
    with stack_over(slow_table, log, mode) as stack:
        started = time.monotonic()
        chat = request(stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "max_tokens": 4}, timeout=30)
        chat_s = time.monotonic() - started
        started = time.monotonic()
        body = {"messages": ASK, "max_tokens": 4, "model": "sagestream-sim"}
        messages = request(stack.url, "POST", "/v1/messages", body, timeout=30)
        messages_s = time.monotonic() - started
    # The bound is 3 s a call (storage.CALL_CAP_S); the function's timeout is 20 s. Generous for a busy machine.
    assert chat_s < 10 and messages_s < 10, (chat_s, messages_s)
    if mode == "open":
        assert chat.status == 200 and messages.status == 200, "served uncounted, as QUOTAS_UNAVAILABLE=open says"
    else:
        assert chat.status == 503 and chat.header("retry-after") == "5"
        assert json.loads(chat.body)["error"]["code"] == "quota_unavailable"
        assert messages.status == 503 and json.loads(messages.body)["error"]["type"] == "overloaded_error"
    logged = records(log)
    assert [r["quota"] for r in logged] == ["unavailable", "unavailable"], logged
    assert [r["status"] for r in logged] == ([200, 200] if mode == "open" else [503, 503])
