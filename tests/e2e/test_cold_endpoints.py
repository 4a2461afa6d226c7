"""Cold and busy endpoints through the whole local chain: the simulated endpoint scaled to zero (SageMaker's own
"no capacity" ValidationError) or throttling every Kth call, and what each protocol's client then gets: a 503 with
Retry-After in its own error shape; or, held (``cold_wait_s``), keep-alives and then its tokens; or a fallback's
answer under the model it asked for, the cold target cooling down meanwhile."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from sagestream_local.endpoint import Scenario
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH
from tests.e2e.test_telemetry import Captured, _captured, emf, logs

openai = pytest.importorskip("openai")

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Hi"}]
KEEPALIVE = b": keep-alive"
COOLDOWN_S = 1.0
MODELS = {
    # the model's own inference component first, then a fallback on the same endpoint
    "sim": {
        "endpoint": SIM_ENDPOINT_NAME,
        "inference_component": "big",
        "fallbacks": [{"endpoint": SIM_ENDPOINT_NAME, "inference_component": "small"}],
    },
    "held": {"endpoint": SIM_ENDPOINT_NAME, "inference_component": "solo", "cold_wait_s": 10},
    "plain": {"endpoint": SIM_ENDPOINT_NAME, "inference_component": "plain"},
    "brief": {"endpoint": SIM_ENDPOINT_NAME, "inference_component": "plain", "cold_wait_s": 0.8},
}
ENV = {
    "MODELS": json.dumps(MODELS),
    "SAGEMAKER_ENDPOINT_NAME": "",
    "COLD_WAIT_S": "0",
    "FALLBACK_COOLDOWN_S": str(COOLDOWN_S),
    "SSE_KEEPALIVE_S": "0.25",
}


@pytest.fixture(scope="module")
def cold_stack() -> Iterator[Captured]:
    yield from _captured(ENV)  # one execution environment: its cooldowns are the ones every request meets


@pytest.fixture
def cold(cold_stack: Captured) -> Iterator[Captured]:
    sim = cold_stack.stack.endpoint
    assert sim is not None
    sim.reset_scenario()
    sim.clear_records()
    yield cold_stack
    sim.reset_scenario()
    time.sleep(COOLDOWN_S)  # no test meets the cooldowns of another


def scale_to_zero(captured: Captured, seconds: float, *names: str) -> None:
    assert captured.stack.endpoint is not None
    captured.stack.endpoint.set_scenario(scaled_to_zero_s=seconds, scaled_to_zero_names=list(names))


def calls(captured: Captured) -> list[tuple[str | None, int | None, str]]:
    assert captured.stack.endpoint is not None
    return [(r.inference_component, r.status, r.fault) for r in captured.stack.endpoint.records]


# --- not held: a 503 with Retry-After, in the route's own error shape ------------------------------------


def openai_error(body: dict[str, Any]) -> tuple[str, str]:
    return body["error"]["type"], body["error"]["code"]


def anthropic_error(body: dict[str, Any]) -> tuple[str, str]:
    return body["type"], body["error"]["type"]


@pytest.mark.parametrize(
    ("path", "body", "error_of"),
    [
        (CHAT, {"model": "plain", "messages": ASK, "stream": True}, openai_error),
        (CHAT, {"model": "plain", "messages": ASK}, openai_error),
        ("/v1/responses", {"model": "plain", "input": "Hi", "stream": True}, openai_error),
        ("/v1/messages", {"model": "plain", "max_tokens": 20, "messages": ASK, "stream": True}, anthropic_error),
    ],
)
def test_a_cold_model_not_held_is_a_503_with_retry_after_in_the_routes_shape(
    cold: Captured, path: str, body: dict[str, Any], error_of: Any
) -> None:
    scale_to_zero(cold, 30, "plain")
    resp, lines = cold.call(path, body)
    assert resp.status == 503, resp.body
    assert (resp.header("retry-after"), resp.header("retry-after-ms"), resp.header("x-should-retry")) == (
        "30",
        "30000",
        "true",
    )
    expected = ("error", "overloaded_error") if path == "/v1/messages" else ("server_error", "no_capacity")
    assert error_of(resp.json()) == expected
    assert calls(cold) == [("plain", 400, "no_capacity")], "asked once: holding is off"
    (log,) = logs(lines)
    assert (log.data["status"], log.data["error_code"], log.data.get("target")) == (503, "no_capacity", None)


# --- held: keep-alives, then the tokens -----------------------------------------------------------------


def test_a_held_stream_gets_keepalives_and_then_its_tokens(cold: Captured) -> None:
    scale_to_zero(cold, 1.2, "solo")
    resp, lines = cold.call(CHAT, {"model": "held", "messages": ASK, "stream": True})
    assert resp.status == 200
    events = [e.data for e in resp.events()]
    first_data = next(n for n, e in enumerate(events) if e.startswith(b"data:"))
    assert first_data >= 2 and set(events[:first_data]) == {KEEPALIVE}, events[: first_data + 1]
    assert events[-1] == b"data: [DONE]" and KEEPALIVE not in events[first_data:]
    chunks = [json.loads(e[6:]) for e in events[first_data:-1]]
    assert {c["model"] for c in chunks} == {"held"} and "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
    )
    asked = calls(cold)
    assert len(asked) >= 2 and asked[-1] == ("solo", 200, "none")
    assert set(asked[:-1]) == {("solo", 400, "no_capacity")}
    (log,) = logs(lines)
    assert log.data["keepalives"] == first_data and log.data["cold_wait_rounds"] == len(asked) - 1
    assert 900 <= log.data["cold_wait_ms"] < 5000, log.data["cold_wait_ms"]
    (blob,) = emf(lines, "ColdWaits")
    assert blob.data["ColdWaits"] == [1] and blob.data["ColdWaitTime"] == [pytest.approx(log.data["cold_wait_ms"])]


def test_a_held_stream_whose_wait_runs_out_ends_with_each_protocols_error_event(cold: Captured) -> None:
    scale_to_zero(cold, 30, "plain")
    sdk = openai.OpenAI(base_url=f"{cold.stack.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError) as chat:
        list(sdk.chat.completions.create(model="brief", messages=ASK, stream=True))  # type: ignore[call-overload]
    assert "no copy running" in chat.value.message
    events = list(sdk.responses.create(model="brief", input="Hi", stream=True))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-2].code == "no_capacity"  # type: ignore[union-attr]
    claude = anthropic.Anthropic(base_url=cold.stack.url, api_key="unused", max_retries=0)
    with (
        pytest.raises(anthropic.APIStatusError) as messages,
        claude.messages.stream(model="brief", max_tokens=20, messages=ASK) as stream,  # type: ignore[arg-type]
    ):
        stream.get_final_message()
    assert messages.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert {fault for _, _, fault in calls(cold)} == {"no_capacity"}


def test_a_held_whole_answer_writes_nothing_until_it_has_one(cold: Captured) -> None:
    scale_to_zero(cold, 1.0, "solo")
    started = time.monotonic()
    resp, _ = cold.call(CHAT, {"model": "held", "messages": ASK})
    assert resp.status == 200 and resp.json()["model"] == "held"
    assert 1.0 <= time.monotonic() - started < 6
    assert calls(cold)[-1] == ("solo", 200, "none") and len(calls(cold)) >= 2


def test_a_throttling_endpoint_is_ridden_out_by_a_held_request(cold: Captured) -> None:
    assert cold.stack.endpoint is not None
    cold.stack.endpoint.set_scenario(throttle_every=1)  # every call, until it is lifted
    lift = threading.Timer(0.8, lambda: cold.stack.endpoint.set_scenario(throttle_every=0))  # type: ignore[union-attr]
    lift.start()
    resp, lines = cold.call(CHAT, {"model": "held", "messages": ASK, "stream": True})
    lift.join()
    assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
    assert {fault for _, _, fault in calls(cold)[:-1]} == {"throttling"}
    assert logs(lines)[0].data["cold_wait_rounds"] >= 1


# --- fallbacks, before the first byte ------------------------------------------------------------------


def test_a_fallback_serves_when_the_first_target_has_no_capacity(cold: Captured) -> None:
    scale_to_zero(cold, 30, "big")
    resp, lines = cold.call(CHAT, {"model": "sim", "messages": ASK, "stream": True})
    assert resp.status == 200 and resp.header("x-sagestream-target") == f"{SIM_ENDPOINT_NAME}/small"
    chunks = [c for c in resp.data_events() if isinstance(c, dict)]
    assert chunks and {c["model"] for c in chunks} == {"sim"}, "the answer names the model asked for"
    assert calls(cold) == [("big", 400, "no_capacity"), ("small", 200, "none")]
    (log,) = logs(lines)
    assert (log.data["model"], log.data["target"], log.data["fallback"]) == ("sim", f"{SIM_ENDPOINT_NAME}/small", True)
    (blob,) = emf(lines, "Fallbacks")
    assert blob.data["Fallbacks"] == [1]


def test_the_cold_target_cools_down_and_is_asked_again_after_it(cold: Captured) -> None:
    scale_to_zero(cold, 30, "big")
    sdk = openai.OpenAI(base_url=f"{cold.stack.url}/v1", api_key="unused", max_retries=0)
    first = sdk.chat.completions.with_raw_response.create(model="sim", messages=ASK)
    assert first.headers["x-sagestream-target"] == f"{SIM_ENDPOINT_NAME}/small" and first.parse().model == "sim"
    within = sdk.chat.completions.with_raw_response.create(model="sim", messages=ASK, stream=True)
    list(within.parse())
    assert within.headers["x-sagestream-target"] == f"{SIM_ENDPOINT_NAME}/small"
    assert calls(cold) == [("big", 400, "no_capacity"), ("small", 200, "none"), ("small", 200, "none")]
    time.sleep(COOLDOWN_S + 0.1)
    assert cold.stack.endpoint is not None
    cold.stack.endpoint.set_scenario(scaled_to_zero_s=0)  # the big copy is up
    after = sdk.chat.completions.with_raw_response.create(model="sim", messages=ASK)
    assert after.headers["x-sagestream-target"] == f"{SIM_ENDPOINT_NAME}/big"
    assert calls(cold)[-1] == ("big", 200, "none") and len(calls(cold)) == 4


# --- sixteen held at once, none retried past its deadline ------------------------------------------------

HELD_AT_ONCE = 16
TIMEOUT_S = 10.0
MARGIN_MS = 1000
DEADLINE_S = TIMEOUT_S - MARGIN_MS / 1000


@pytest.fixture(scope="module")
def many() -> Iterator[LocalStack]:
    stack = LocalStack(
        port=0,
        concurrency=1,
        max_concurrency=HELD_AT_ONCE,  # one environment holding 16 at once (Lambda Managed Instances)
        timeout_s=TIMEOUT_S,
        env={
            "PYTHONPATH": PYTHONPATH,
            "UPSTREAM_READ_TIMEOUT_S": "5",
            "UPSTREAM_MAX_ATTEMPTS": "1",
            "DEADLINE_MARGIN_MS": str(MARGIN_MS),
            "COLD_WAIT_S": "600",  # longer than any deadline: the deadline must win
            "SSE_KEEPALIVE_S": "0.5",
            # The 16 first calls open the target's breaker; held, they wait for its probe, one a second (the
            # default 10 s would outlast these 9 s deadlines; a real copy takes minutes to start).
            "BREAKER_COOLDOWN_S": "1",
        },
        scenario=Scenario(ttft_ms=5, cadence_ms=2, tokens=10),
        upstream="simulated",
        stdout=subprocess.DEVNULL,
    )
    with stack:
        yield stack


def held_at_once(stack: LocalStack) -> list[tuple[float, StreamedResponse]]:
    answers: list[tuple[float, StreamedResponse]] = []
    lock = threading.Lock()

    def one() -> None:
        started = time.monotonic()
        resp = request(stack.url, "POST", CHAT, {"messages": ASK, "stream": True}, timeout=TIMEOUT_S + 10)
        resp.events()
        with lock:
            answers.append((started, resp))

    threads = [threading.Thread(target=one) for _ in range(HELD_AT_ONCE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S + 15)
    assert len(answers) == HELD_AT_ONCE
    return answers


def asked_after_deadline(stack: LocalStack, answers: list[tuple[float, StreamedResponse]]) -> list[float]:
    """The calls of each request to the endpoint made after its deadline, in seconds past it: an invocation
    starts after its client sent the request, so its deadline is no sooner than DEADLINE_S after that."""
    assert stack.endpoint is not None
    sent = {resp.header("x-request-id"): started for started, resp in answers}
    late = []
    for record in stack.endpoint.records:
        past = record.received_monotonic_ns / 1e9 - (sent[record.inference_id] + DEADLINE_S)
        if past > 0:
            late.append(past)
    return late


def test_sixteen_held_streams_all_get_their_tokens_when_the_copy_starts(many: LocalStack) -> None:
    assert many.endpoint is not None
    many.endpoint.clear_records()
    many.endpoint.set_scenario(scaled_to_zero_s=2.0)
    answers = held_at_once(many)
    assert [resp.status for _, resp in answers] == [200] * HELD_AT_ONCE
    assert all(resp.data_events()[-1] == "[DONE]" for _, resp in answers)
    served = [r for r in many.endpoint.records if r.status == 200]
    assert len(served) == HELD_AT_ONCE and {r.inference_id for r in served} == {
        resp.header("x-request-id") for _, resp in answers
    }
    assert asked_after_deadline(many, answers) == []
    cold_calls = len(many.endpoint.records) - HELD_AT_ONCE
    # the first round's calls until the breaker opened (5 of them, or more made at once), then its probes (one a
    # second): not one call per held request per round
    assert 5 <= cold_calls <= HELD_AT_ONCE + 8, cold_calls


def test_sixteen_held_past_their_deadline_end_in_time_and_none_asks_after_it(many: LocalStack) -> None:
    assert many.endpoint is not None
    many.endpoint.clear_records()
    many.endpoint.set_scenario(scaled_to_zero_s=60)
    started = time.monotonic()
    answers = held_at_once(many)
    assert time.monotonic() - started < TIMEOUT_S + 2, "every response ended within its invocation"
    for _, resp in answers:
        # keep-alives started the response (200); the hold's end is the protocol's error event, no [DONE]
        assert resp.status == 200
        events = resp.data_events()
        assert events and events[-1]["error"]["code"] == "no_capacity" and "[DONE]" not in events
    assert asked_after_deadline(many, answers) == []
    assert {r.fault for r in many.endpoint.records} == {"no_capacity"}
