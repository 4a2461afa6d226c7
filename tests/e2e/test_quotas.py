"""Quotas through the whole local chain, with real clients: the OpenAI and Anthropic SDKs read the rate-limit
headers of every answer and the 429s; moto's DynamoDB server holds the counts, and the test reads them there
to see that a request is charged exactly what the container reported, a client that leaves what was generated,
and that callers racing over several execution environments never pass a limit together."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import request
from tests.conftest import PYTHONPATH

openai = pytest.importorskip("openai")

ALICE, BOB, CI, RACER, COUNTER = "sk-alice", "sk-bob", "sk-ci", "sk-racer", "sk-counter"
TPM = 600
POLICY = {
    "default": {"tokens_per_minute": TPM, "requests_per_minute": 100},
    "groups": {
        "batch": {"tokens_per_minute": 100000},
        "racers": {"requests_per_minute": 10},
        "counters": {"requests_per_minute": 3},
    },
    "callers": {
        "key:" + hashlib.sha256(CI.encode()).hexdigest()[:16]: "batch",
        "key:" + hashlib.sha256(RACER.encode()).hexdigest()[:16]: "racers",
        "key:" + hashlib.sha256(COUNTER.encode()).hexdigest()[:16]: "counters",
    },
}
ASK = [{"role": "user", "content": "Hi"}]
MODEL = SIM_ENDPOINT_NAME


def fingerprint(key: str) -> str:
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    env = {
        "PYTHONPATH": PYTHONPATH,
        "AUTH_MODE": "api_key",
        "API_KEYS": ",".join((ALICE, BOB, CI, RACER, COUNTER)),
        "QUOTAS": json.dumps(POLICY),
        "RESPONSES_STORE": "dynamodb",
        "MAX_TOKENS_LIMIT": "512",
    }
    # Four execution environments: callers racing on one key meet in DynamoDB, not in one process's memory.
    with LocalStack(port=0, concurrency=4, timeout_s=60.0, env=env, upstream="simulated") as running:
        yield running


def used(stack: LocalStack, key: str) -> int:
    """The tokens the caller's current minute holds, read from the table."""
    assert stack.dynamodb is not None
    client = stack.dynamodb.client()
    digest = hashlib.sha256(fingerprint(key).encode()).hexdigest()[:32]
    pk = f"{digest}#minute#{int(time.time() // 60)}"
    item = client.get_item(TableName=stack.dynamodb.quotas_table, Key={"pk": {"S": pk}}, ConsistentRead=True)
    return int(item.get("Item", {}).get("tokens", {}).get("N", "0"))


def charged(stack: LocalStack, key: str, action: Any, timeout_s: float = 10.0) -> int:
    """What ``action``'s requests added to the caller's minute, once their settles have run (each runs just
    after its response is closed): the count read until it has moved and then held still."""
    before = used(stack, key)
    action()
    deadline = time.monotonic() + timeout_s
    now = used(stack, key)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        later = used(stack, key)
        if later == now and later != before:
            break
        now = later
    return used(stack, key) - before


def minute_has_room(seconds: float = 8.0) -> None:
    """Wait out the end of a minute when it is this near: a test's requests count in one window."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.2)


def sdk(stack: LocalStack, key: str) -> Any:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key=key, max_retries=0)


def test_a_streamed_answer_carries_the_headers_and_is_charged_what_the_container_reported(stack: LocalStack) -> None:
    minute_has_room()
    before = used(stack, CI)
    raw = sdk(stack, CI).chat.completions.with_raw_response.create(
        model=MODEL, messages=ASK, stream=True, max_tokens=16
    )
    chunks = list(raw.parse())
    assert raw.headers["x-ratelimit-limit-tokens"] == "100000", "the key's group's limit"
    # What is left once this request's worst case (the prompt's estimate and its 16) is held.
    assert 100000 - before - 16 - 100 < int(raw.headers["x-ratelimit-remaining-tokens"]) < 100000 - before - 16
    assert raw.headers["x-ratelimit-limit-requests"] == "100"
    assert raw.headers["x-ratelimit-reset-tokens"].endswith("s")
    assert all(c.usage is None for c in chunks), "the client did not ask for usage: none reaches it"
    sim = stack.endpoint
    assert sim is not None
    body = sim.records[-1].request
    assert body["stream_options"] == {"include_usage": True}, "the container is asked for it all the same"
    # The container's own count, asked for this time, is what the request is charged: no more, no less.
    usages: list[Any] = []

    def ask() -> None:
        for chunk in sdk(stack, CI).chat.completions.create(
            model=MODEL, messages=ASK, stream=True, max_tokens=16, stream_options={"include_usage": True}
        ):
            usages.append(chunk.usage)

    assert charged(stack, CI, ask) == [u for u in usages if u is not None][-1].total_tokens


def test_over_the_limit_is_a_429_the_openai_sdk_reads(stack: LocalStack) -> None:
    minute_has_room()
    client = sdk(stack, ALICE)
    # Each holds 400 and its prompt's estimate while it runs, then settles to the ~50 it used: a few fit, then none.
    refused = None
    for _ in range(20):
        try:
            client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=400)
        except openai.RateLimitError as exc:
            refused = exc
            break
    assert refused is not None, "the minute's 600 tokens ran out"
    body = refused.body
    assert isinstance(body, dict) and body["code"] == "rate_limit_exceeded" and body["type"] == "tokens"
    assert "tokens per minute (TPM): Limit 600" in body["message"]
    headers = refused.response.headers
    assert 1 <= int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-limit-tokens"] == "600"
    requested = int(re.search(r"Requested (\d+)", body["message"]).group(1))  # type: ignore[union-attr]
    assert requested > 400 and int(headers["x-ratelimit-remaining-tokens"]) < requested
    # Another caller is not held back by Alice's minute.
    assert sdk(stack, BOB).chat.completions.create(model=MODEL, messages=ASK, max_tokens=8).choices


def test_the_anthropic_sdk_gets_its_own_headers_and_its_own_error(stack: LocalStack) -> None:
    minute_has_room()
    client = anthropic.Anthropic(base_url=stack.url, api_key=BOB, max_retries=0)
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=8, messages=ASK)
    assert raw.parse().content
    assert raw.headers["anthropic-ratelimit-tokens-limit"] == str(TPM)
    assert raw.headers["anthropic-ratelimit-tokens-reset"].endswith("Z")
    assert "x-ratelimit-limit-tokens" not in raw.headers
    with pytest.raises(anthropic.RateLimitError) as refused:
        for _ in range(10):
            client.messages.create(model=MODEL, max_tokens=500, messages=ASK)
    err = refused.value
    assert isinstance(err.body, dict) and err.body["error"]["type"] == "rate_limit_error"
    assert int(err.response.headers["retry-after"]) >= 1
    assert err.response.headers["anthropic-ratelimit-tokens-limit"] == str(TPM)


def test_count_tokens_is_free(stack: LocalStack) -> None:
    minute_has_room()
    before = used(stack, CI)
    client = anthropic.Anthropic(base_url=stack.url, api_key=CI, max_retries=0)
    for _ in range(3):
        assert client.messages.count_tokens(model=MODEL, messages=ASK).input_tokens > 0
    time.sleep(0.5)
    assert used(stack, CI) == before


def test_count_tokens_counts_as_a_request_with_the_headers_and_is_refused_past_the_requests_limit(
    stack: LocalStack,
) -> None:
    minute_has_room()
    client = anthropic.Anthropic(base_url=stack.url, api_key=COUNTER, max_retries=0)
    before = used(stack, COUNTER)
    for left in (2, 1, 0):
        raw = client.messages.with_raw_response.count_tokens(model=MODEL, messages=ASK)
        assert raw.parse().input_tokens > 0
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "3"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == str(left)
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.count_tokens(model=MODEL, messages=ASK)
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert stack.endpoint is not None
    asked = len(stack.endpoint.records)
    with pytest.raises(anthropic.RateLimitError):
        client.messages.count_tokens(model=MODEL, messages=ASK)
    assert len(stack.endpoint.records) == asked, "a refused count costs the endpoint nothing"
    assert used(stack, COUNTER) == before, "a count is no tokens"


def test_a_client_that_leaves_is_charged_what_was_generated(stack: LocalStack) -> None:
    minute_has_room()
    sim = stack.endpoint
    assert sim is not None
    body = {"messages": ASK, "stream": True, "max_tokens": 64}
    statuses: list[int] = []

    def leave() -> None:
        headers = {"authorization": f"Bearer {CI}"}
        statuses.append(request(stack.url, "POST", "/v1/chat/completions", body, headers, stop_after=4).status)

    sim.set_scenario(cadence_ms=50, tokens=64)
    try:
        cost = charged(stack, CI, leave)
    finally:
        sim.reset_scenario()
    sent = sim.records[-1]
    assert statuses == [200] and sent.outcome != "completed"
    # The prompt's estimate and what was generated until the endpoint was told to stop; not the 64 reserved, and
    # not the 64 the endpoint would have generated had the client stayed.
    assert 0 < cost < len(sent.body) // 3 + 1 + 64
    assert cost <= len(sent.body) // 3 + 1 + len(sent.tokens)


def test_32_callers_on_one_key_over_four_environments_never_pass_its_limit(stack: LocalStack) -> None:
    minute_has_room(seconds=20)
    results: list[int] = []
    bodies: list[bytes] = []
    lock = threading.Lock()
    go = threading.Barrier(32)

    def one() -> None:
        go.wait()
        while True:
            resp = request(
                stack.url,
                "POST",
                "/v1/chat/completions",
                {"messages": ASK, "max_tokens": 4},
                {"authorization": f"Bearer {RACER}"},
            )
            # Lambda's own 429 when all four environments are busy (the front's "Rate Exceeded."): the caller
            # tries again, as an SDK would; only the function's answers are counted.
            if resp.status != 429 or b"Rate Exceeded" not in resp.body:
                break
            time.sleep(0.05)
        with lock:
            results.append(resp.status)
            if resp.status != 200:
                bodies.append(resp.body)

    threads = [threading.Thread(target=one) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(200) == 10 and results.count(429) == 22, (results, bodies[:3])
    assert all(json.loads(body)["error"]["code"] == "rate_limit_exceeded" for body in bodies)


def test_a_background_response_is_counted_by_its_run(stack: LocalStack) -> None:
    minute_has_room(seconds=15)
    client = sdk(stack, CI)
    finished: list[Any] = []

    def run() -> None:
        done = queued = client.responses.create(model=MODEL, input="Hi", background=True)
        deadline = time.monotonic() + 20
        while done.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.2)
            done = client.responses.retrieve(queued.id)
        finished.append(done)

    cost = charged(stack, CI, run)
    assert finished[0].status == "completed" and finished[0].usage is not None
    assert cost == finished[0].usage.total_tokens


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_dynamodb_out_of_reach_fails_as_the_setting_says_never_a_500(mode: str) -> None:
    env = {
        "PYTHONPATH": PYTHONPATH,
        "AUTH_MODE": "none",
        "QUOTAS": "tokens_per_minute=1000",
        "QUOTAS_TABLE": "sagestream-quotas",
        "QUOTAS_UNAVAILABLE": mode,
        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9",  # the discard port: nothing answers
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }
    with LocalStack(port=0, timeout_s=60.0, env=env, upstream="simulated") as local:
        chat = request(local.url, "POST", "/v1/chat/completions", {"messages": ASK, "max_tokens": 4})
        messages = request(local.url, "POST", "/v1/messages", {"messages": ASK, "max_tokens": 4, "model": MODEL})
    if mode == "open":
        assert chat.status == 200 and "x-ratelimit-limit-tokens" not in dict(chat.headers)
        return
    assert chat.status == 503 and chat.header("retry-after") == "5"
    assert json.loads(chat.body)["error"]["code"] == "quota_unavailable"
    assert messages.status == 503
    assert json.loads(messages.body)["error"]["type"] == "overloaded_error", "Anthropic's shape on /v1/messages"
