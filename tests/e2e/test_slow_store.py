"""Nothing beside the token path (issue 53): with the stored-responses table slow (moto's DynamoDB behind a loopback
proxy that holds every request a second, or answers a byte a second), every stored path's deltas still reach the
client at the endpoint's cadence and its answer ends when its last byte is written, not when the store has its
copy; a stalled read behind ``GET /v1/responses/{id}`` is a 503 in the route's shape within seconds, never the
front's timeout; and what was answered is still stored once the table has answered."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.slow_proxy import SlowProxy
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.conftest import PYTHONPATH

MODEL = SIM_ENDPOINT_NAME
HEADERS = {"authorization": "Bearer k-alice", "content-type": "application/json"}
# Each chunk a DynamoDB client sends held this long (a request may be two: its head, then its body): a stored stream
# made several requests, and each once ended 4+ s late; under botocore's 2 s read timeout.
DELAY_S = 0.5


@pytest.fixture(scope="module")
def slow() -> Iterator[tuple[LocalStack, SlowProxy]]:
    with LocalDynamoDB() as db, SlowProxy(db.url) as proxy:
        env = {
            "PYTHONPATH": PYTHONPATH,
            "API_KEYS": "k-alice",
            **db.function_env(),
            "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        # Four environments: one still storing what it answered is busy, as on Lambda, and the next request
        # goes to another.
        with LocalStack(port=0, concurrency=4, timeout_s=60.0, env=env, upstream="simulated") as stack:
            yield stack, proxy


def timed_stream(stack: LocalStack, body: dict[str, object]) -> tuple[list[float], float, str]:
    """The arrival of each text delta, of the stream's end, and the response id."""
    arrivals: list[float] = []
    response_id = ""
    with httpx.stream("POST", stack.url + "/v1/responses", json=body, headers=HEADERS, timeout=60) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                response_id = response_id or event.get("response", {}).get("id", "")
                if event["type"] == "response.output_text.delta":
                    arrivals.append(time.monotonic())
        ended = time.monotonic()
    return arrivals, ended, response_id


def bunched(arrivals: list[float]) -> int:
    return sum(1 for a, b in itertools.pairwise(arrivals) if b - a < 0.001)


def test_a_whole_stored_answer_does_not_wait_for_the_store(slow: tuple[LocalStack, SlowProxy]) -> None:
    stack, proxy = slow
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(ttft_ms=5, cadence_ms=1, tokens=5)
    proxy.delay_s = 2.0
    try:
        started = time.monotonic()
        answer = httpx.post(
            stack.url + "/v1/responses", json={"model": MODEL, "input": "Hi"}, headers=HEADERS, timeout=60
        )
        took = time.monotonic() - started
    finally:
        proxy.delay_s = 0.0
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    assert took < 2.0, took  # the PutItem alone took 2 s or more


@pytest.mark.parametrize("background", [False, True], ids=["stored", "background"])
def test_a_stored_stream_keeps_the_endpoints_cadence_and_ends_with_its_last_byte(
    slow: tuple[LocalStack, SlowProxy], background: bool
) -> None:
    stack, proxy = slow
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(ttft_ms=5, cadence_ms=15, tokens=40)
    proxy.delay_s = DELAY_S
    try:
        body = {"model": MODEL, "input": "Count.", "stream": True, "background": background}
        arrivals, ended, response_id = timed_stream(stack, body)
    finally:
        proxy.delay_s = 0.0
    assert len(arrivals) == 40 and response_id
    assert bunched(arrivals) <= 10, bunched(arrivals)
    # Every DynamoDB request took a second: the answer's end waited for none of them.
    assert ended - arrivals[-1] < DELAY_S, ended - arrivals[-1]
    got = httpx.get(f"{stack.url}/v1/responses/{response_id}", headers=HEADERS, timeout=30)
    assert got.status_code == 200 and got.json()["status"] == "completed", got.text  # stored after the answer


def test_a_stalled_read_is_a_503_in_the_routes_shape_within_seconds(slow: tuple[LocalStack, SlowProxy]) -> None:
    stack, proxy = slow
    proxy.pace_s = 1.0  # a byte a second: botocore's read timeout never fires
    try:
        started = time.monotonic()
        answer = httpx.get(f"{stack.url}/v1/responses/resp_{'0' * 32}", headers=HEADERS, timeout=60)
        took = time.monotonic() - started
    finally:
        proxy.pace_s = 0.0
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_error", answer.text
    assert answer.headers.get("x-request-id") and took < 15, took
