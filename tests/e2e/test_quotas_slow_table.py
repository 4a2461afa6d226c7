"""A quota table that answers a byte a second (moto's server behind a loopback proxy that trickles its answers): the
reserve is bounded in total, not per socket read, so the client gets a 503 ``quota_unavailable`` in the route's
shape within a few seconds, with the invocation's log record written, never the front's 502 after the function's
timeout; and a request the reserve refused this way is never served uncounted unless ``QUOTAS_UNAVAILABLE=open``
says so."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.slow_proxy import SlowProxy
from sagestream_local.stack import LocalStack
from tests.client import request
from tests.conftest import PYTHONPATH

ASK = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def slow_table() -> Iterator[str]:
    with LocalDynamoDB() as db, SlowProxy(db.url, pace_s=1.0) as trickle:
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
