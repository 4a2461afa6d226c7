"""The simulated endpoint's side of SageMaker routing, through real sockets and boto3's own request building:
it records the routing and correlation headers each call came with (also in ``/_sim/records``), and a
``PrefixAwareId`` it has seen before gets its first token after ``prefix_hit_ttft_ms`` instead of ``ttft_ms``."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from sagestream_local.endpoint import PREFIX_CACHE_IDS, Record, Scenario, SimulatedEndpoint

# A slow first token for a new prefix and a fast one for a cached prefix, far enough apart that a loaded
# machine cannot blur them: a miss waits at least MISS_MS (the endpoint sleeps until then), a hit far less.
MISS_MS, HIT_MS = 400.0, 20.0
SCENARIO = Scenario(ttft_ms=MISS_MS, prefix_hit_ttft_ms=HIT_MS, cadence_ms=0, tokens=4)
CHAT = {"messages": [{"role": "user", "content": "Describe the trams of Lisbon"}], "stream": True}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatedEndpoint]:
    with SimulatedEndpoint(SCENARIO) as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def fresh(sim: SimulatedEndpoint) -> Iterator[None]:
    sim.reset_scenario()
    sim.clear_records()
    yield
    sim.reset_scenario()


@pytest.fixture(scope="module")
def client(sim: SimulatedEndpoint) -> Any:
    assert sim.url.startswith("http://127.0.0.1:")
    return boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=sim.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=5, connect_timeout=2),
    )


def stream(client: Any, **ids: str) -> None:
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(CHAT).encode(), **ids
    )
    assert b"".join(e["PayloadPart"]["Bytes"] for e in response["Body"] if "PayloadPart" in e)


def first_token_ms(record: Record) -> float:
    return (record.tokens[0].monotonic_ns - record.received_monotonic_ns) / 1e6


def test_each_call_records_the_ids_botocore_sent_as_headers(sim: SimulatedEndpoint, client: Any) -> None:
    stream(client, InferenceId="req-1", PrefixAwareId="conversation-1", SessionId="sess-1")
    whole = client.invoke_endpoint(
        EndpointName="llm",
        ContentType="application/json",
        Body=json.dumps({**CHAT, "stream": False}).encode(),
        InferenceId="req-2",
        PrefixAwareId="conversation-1",
    )
    assert whole["Body"].read()
    streamed, answered = sim.records
    assert (streamed.inference_id, streamed.prefix_aware_id, streamed.session_id) == (
        "req-1",
        "conversation-1",
        "sess-1",
    )
    assert (answered.operation, answered.inference_id, answered.prefix_aware_id, answered.session_id) == (
        "InvokeEndpoint",
        "req-2",
        "conversation-1",
        None,
    )
    with urllib.request.urlopen(f"{sim.url}/_sim/records", timeout=5) as resp:
        listed = json.loads(resp.read())
    assert [(r["inference_id"], r["prefix_aware_id"], r["prefix_hit"]) for r in listed] == [
        ("req-1", "conversation-1", False),
        ("req-2", "conversation-1", True),
    ]


def test_a_repeated_prefix_aware_id_gets_its_first_token_sooner(sim: SimulatedEndpoint, client: Any) -> None:
    stream(client, PrefixAwareId="conversation-7")
    stream(client, PrefixAwareId="conversation-7")
    stream(client, PrefixAwareId="conversation-8")
    stream(client)
    first, repeated, other, none = sim.records
    assert [r.prefix_hit for r in sim.records] == [False, True, False, False]
    assert first_token_ms(first) >= MISS_MS
    assert first_token_ms(repeated) < MISS_MS / 2, "a cached prefix is not waited for as a new one"
    assert first_token_ms(other) >= MISS_MS and first_token_ms(none) >= MISS_MS
    print(f"first token: new id {first_token_ms(first):.1f} ms, repeated id {first_token_ms(repeated):.1f} ms")


def test_clearing_the_records_empties_the_prefix_cache_and_null_turns_the_effect_off(
    sim: SimulatedEndpoint, client: Any
) -> None:
    stream(client, PrefixAwareId="conversation-9")
    sim.clear_records()
    stream(client, PrefixAwareId="conversation-9")
    assert [r.prefix_hit for r in sim.records] == [False]
    sim.set_scenario(prefix_hit_ttft_ms=None)
    stream(client, PrefixAwareId="conversation-9")
    (_, repeated) = sim.records
    assert repeated.prefix_hit and first_token_ms(repeated) >= MISS_MS


def test_the_prefix_cache_forgets_the_least_recent_id_beyond_its_size(sim: SimulatedEndpoint) -> None:
    assert not sim._prefix_seen("oldest")
    for n in range(PREFIX_CACHE_IDS):
        sim._prefix_seen(f"id-{n}")
    assert not sim._prefix_seen("oldest"), "evicted"
    assert sim._prefix_seen(f"id-{PREFIX_CACHE_IDS - 1}")


@pytest.mark.parametrize("bad", [-1, "fast", True])
def test_a_bad_prefix_hit_delay_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="prefix_hit_ttft_ms"):
        Scenario(prefix_hit_ttft_ms=bad)  # type: ignore[arg-type]
