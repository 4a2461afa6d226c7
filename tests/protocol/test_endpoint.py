"""The simulated SageMaker endpoint, through real sockets and real boto3, decoded by botocore's own parser."""

from __future__ import annotations

import dataclasses
import doctest
import http.client
import importlib
import itertools
import json
import pkgutil
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError
from urllib3.exceptions import ProtocolError

import sagestream_local.endpoint
from sagestream_local.endpoint import NO_CAPACITY_MESSAGE, Scenario, SimulatedEndpoint

FAST = Scenario(ttft_ms=0, cadence_ms=0, tokens=24, non_ascii=0.4)
SIGV4_HEADERS = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/sagemaker/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date, Signature=0123abcd",
    "X-Amz-Date": "20250101T000000Z",
    "Content-Type": "application/json",
}
REQUESTS = {
    "openai": {"messages": [{"role": "user", "content": "Describe the trams of Lisbon"}], "stream": True},
    "tgi": {"inputs": "Describe the trams of Lisbon", "parameters": {"details": True}, "stream": True},
    "lmi": {"inputs": "Describe the trams of Lisbon", "parameters": {"details": True}, "stream": True},
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatedEndpoint]:
    with SimulatedEndpoint(FAST) as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def fresh_scenario(sim: SimulatedEndpoint) -> Iterator[None]:
    sim.reset_scenario()
    yield
    sim.reset_scenario()


@pytest.fixture(scope="module")
def client(sim: SimulatedEndpoint) -> Any:
    return boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=sim.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        # one attempt: each fault is seen exactly as the endpoint sent it
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=5, connect_timeout=2),
    )


def stream(client: Any, body: dict[str, Any], **kwargs: Any) -> tuple[list[bytes], dict[str, Any]]:
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(body), **kwargs
    )
    return [event["PayloadPart"]["Bytes"] for event in response["Body"]], response


def raw_post(sim: SimulatedEndpoint, path: str, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
    host, port = sim.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", path, body, headers)
    return conn.getresponse()


# ------------------------------------------------------------------------------------ bytes and framing


def same_except_ids(body: bytes) -> bytes:
    """OpenAI chunks carry a per-request id and creation second; everything else is deterministic."""
    return re.sub(rb'"(id|created)":("[^"]*"|\d+)', b"", body)


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_split_and_framing_decodes_to_the_same_bytes(sim: SimulatedEndpoint, client: Any, dialect: str) -> None:
    sim.set_scenario(dialect=dialect)
    reference, _ = stream(client, REQUESTS[dialect])
    whole = same_except_ids(b"".join(reference))
    assert len(reference) >= 24, "one PayloadPart per model event"
    for framing in ("chunked", "close"):
        for split in ("none", "midline", "utf8", "coalesce", "bytes"):
            sim.set_scenario(dialect=dialect, framing=framing, split=split)
            parts, _ = stream(client, REQUESTS[dialect])
            assert same_except_ids(b"".join(parts)) == whole, (framing, split)
            if split == "midline":
                assert any(not p.endswith(b"\n") for p in parts)
            elif split == "utf8":
                # some part ends on a UTF-8 lead byte: the character continues in the next PayloadPart
                assert any(p[-1] >= 0xC0 for p in parts)
            elif split == "coalesce":
                assert len(parts) < len(reference)
            elif split == "bytes":
                assert all(len(p) == 1 for p in parts)
    assert sim.records[-1].outcome == "completed"


def test_frames_decode_with_botocores_event_stream_buffer(sim: SimulatedEndpoint) -> None:
    body = json.dumps(REQUESTS["openai"]).encode()
    response = raw_post(sim, "/endpoints/llm/invocations-response-stream", body, SIGV4_HEADERS)
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/vnd.amazon.eventstream"
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert response.getheader("X-Amzn-Invoked-Production-Variant") == "AllTraffic"
    assert response.getheader("X-Amzn-SageMaker-Content-Type") == "text/event-stream"
    buffer = EventStreamBuffer()
    buffer.add_data(response.read())
    messages = list(buffer)
    assert messages
    for message in messages:
        assert message.headers == {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        }
    assert messages[-1].payload == b"data: [DONE]\n\n"


def test_close_delimited_framing_has_no_length_and_ends_with_the_connection(sim: SimulatedEndpoint) -> None:
    sim.set_scenario(framing="close")
    body = json.dumps(REQUESTS["openai"]).encode()
    response = raw_post(sim, "/endpoints/llm/invocations-response-stream", body, SIGV4_HEADERS)
    assert response.getheader("Transfer-Encoding") is None
    assert response.getheader("Content-Length") is None
    assert response.getheader("Connection") == "close"
    buffer = EventStreamBuffer()
    buffer.add_data(response.read())
    assert list(buffer)[-1].payload == b"data: [DONE]\n\n"


def test_corrupt_crc_frame_is_rejected_by_botocore(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(fault="corrupt_crc", fault_after=3)
    body = json.dumps(REQUESTS["openai"]).encode()
    buffer = EventStreamBuffer()
    buffer.add_data(raw_post(sim, "/endpoints/llm/invocations-response-stream", body, SIGV4_HEADERS).read())
    with pytest.raises(ChecksumMismatch):
        list(buffer)
    with pytest.raises(ChecksumMismatch):
        stream(client, REQUESTS["openai"])


# --------------------------------------------------------------------------------------------- dialects


def sse_data(parts: list[bytes], prefix: bytes = b"data: ") -> list[bytes]:
    events = b"".join(parts).split(b"\n\n")
    assert events[-1] == b""
    assert all(e.startswith(prefix) for e in events[:-1])
    return [e.removeprefix(prefix) for e in events[:-1]]


def test_openai_chat_chunks_role_content_finish_usage_done(sim: SimulatedEndpoint, client: Any) -> None:
    request = {**REQUESTS["openai"], "stream_options": {"include_usage": True}}
    parts, response = stream(client, request)
    assert response["ContentType"] == "text/event-stream"
    data = sse_data(parts)
    assert data[-1] == b"[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = chat_text(parts)
    assert text.startswith("You asked about Describe the trams of.")
    assert any(ord(ch) > 127 for ch in text), "non-ASCII words are in the mix"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24


def test_openai_prompt_gets_text_completion_and_max_tokens_means_length(sim: SimulatedEndpoint, client: Any) -> None:
    parts, _ = stream(client, {"prompt": "Once upon a time", "max_tokens": 5, "stream": True})
    chunks = [json.loads(d) for d in sse_data(parts)[:-1]]
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert len([c for c in chunks if c["choices"][0]["text"]]) == 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_tgi_tokens_then_eos_special_token_with_details(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(dialect="tgi")
    parts, _ = stream(client, REQUESTS["tgi"])
    events = [json.loads(d) for d in sse_data(parts, prefix=b"data:")]
    assert all(e["generated_text"] is None and e["details"] is None for e in events[:-1])
    last = events[-1]
    assert last["token"] == {**last["token"], "text": "</s>", "special": True}
    assert last["details"]["finish_reason"] == "eos_token"
    assert last["details"]["generated_tokens"] == len(events) == 25
    assert last["generated_text"] == "".join(e["token"]["text"] for e in events[:-1])

    parts, _ = stream(client, {**REQUESTS["tgi"], "parameters": {"max_new_tokens": 7}})
    events = [json.loads(d) for d in sse_data(parts, prefix=b"data:")]
    assert len(events) == 7 and not events[-1]["token"]["special"]
    assert events[-1]["details"]["finish_reason"] == "length"


def test_lmi_jsonlines_last_line_carries_details(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(dialect="lmi")
    parts, response = stream(client, {**REQUESTS["lmi"], "parameters": {"max_new_tokens": 9}})
    assert response["ContentType"] == "application/jsonlines"
    lines = [json.loads(line) for line in b"".join(parts).splitlines()]
    assert len(lines) == 9
    assert set(lines[0]) == {"token"} and set(lines[0]["token"]) == {"id", "text", "log_prob"}
    assert lines[-1]["details"]["finish_reason"] == "length"
    assert lines[-1]["details"]["generated_tokens"] == 9
    assert lines[-1]["generated_text"] == "".join(line["token"]["text"] for line in lines)


def test_stop_sequence_ends_generation(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(dialect="tgi")
    parts, _ = stream(client, {**REQUESTS["tgi"], "parameters": {"stop": ["trams"]}})
    last = json.loads(sse_data(parts, prefix=b"data:")[-1])
    assert last["details"]["finish_reason"] == "stop_sequence"
    assert last["generated_text"].endswith("trams")


def chat_text(parts: list[bytes]) -> str:
    chunks = [json.loads(d) for d in sse_data(parts)[:-1]]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def test_content_is_deterministic_per_prompt_and_distinct_across_prompts(client: Any) -> None:
    def text(prompt: str) -> str:
        parts, _ = stream(client, {"messages": [{"role": "user", "content": prompt}], "stream": True})
        return chat_text(parts)

    a1, a2, b = text("alpha beta"), text("alpha beta"), text("gamma delta")
    assert a1 == a2
    assert a1.startswith("You asked about alpha beta.") and b.startswith("You asked about gamma delta.")
    assert a1.removeprefix("You asked about alpha beta.") != b.removeprefix("You asked about gamma delta.")


@pytest.mark.parametrize(
    ("dialect", "request_body", "check"),
    [
        ("openai", {"messages": [{"role": "user", "content": "hi"}]}, lambda a: a["object"] == "chat.completion"),
        ("openai", {"prompt": "hi"}, lambda a: a["object"] == "text_completion" and a["choices"][0]["text"]),
        ("tgi", {"inputs": "hi"}, lambda a: a[0]["details"]["finish_reason"] == "eos_token"),
        ("lmi", {"inputs": "hi"}, lambda a: set(a) == {"generated_text"}),
    ],
)
def test_invoke_endpoint_returns_the_whole_answer(
    sim: SimulatedEndpoint, client: Any, dialect: str, request_body: dict[str, Any], check: Any
) -> None:
    sim.set_scenario(dialect=dialect)
    response = client.invoke_endpoint(
        EndpointName="llm", ContentType="application/json", Accept="application/json", Body=json.dumps(request_body)
    )
    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert check(json.loads(response["Body"].read()))
    record = sim.records[-1]
    assert record.operation == "InvokeEndpoint" and record.accept == "application/json"


def test_a_body_the_container_cannot_read_is_a_model_error(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(dialect="tgi")
    with pytest.raises(ClientError) as caught:
        stream(client, REQUESTS["openai"])
    assert caught.value.response["Error"]["Code"] == "ModelError"
    assert caught.value.response["OriginalStatusCode"] == 422


# -------------------------------------------------------------------------------------- errors, faults


@pytest.mark.parametrize(
    ("fault", "code", "status"),
    [
        ("http_400", "ValidationError", 400),
        ("http_424", "ModelError", 424),
        ("http_429", "ModelNotReadyException", 429),
        ("throttling", "ThrottlingException", 400),
        ("http_500", "InternalFailure", 500),
        ("http_503", "ServiceUnavailable", 503),
    ],
)
@pytest.mark.parametrize("operation", ["stream", "whole"])
def test_http_faults_raise_the_client_error_sagemaker_would(
    sim: SimulatedEndpoint, client: Any, fault: str, code: str, status: int, operation: str
) -> None:
    sim.set_scenario(fault=fault, fault_after=5)  # HTTP-status faults ignore fault_after
    with pytest.raises(ClientError) as caught:
        if operation == "stream":
            stream(client, REQUESTS["openai"])
        else:
            client.invoke_endpoint(EndpointName="llm", ContentType="application/json", Body=b'{"prompt": "x"}')
    assert caught.value.response["Error"]["Code"] == code
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    if fault == "http_424":
        assert caught.value.response["OriginalStatusCode"] == 400
        assert caught.value.response["LogStreamArn"].startswith("arn:aws:logs:us-east-1:123456789012:")
        assert "OriginalMessage" in caught.value.response
    assert sim.records[-1].fault == fault and sim.records[-1].status == status


def call(client: Any, operation: str, **kwargs: Any) -> None:
    if operation == "stream":
        stream(client, REQUESTS["openai"], **kwargs)
    else:
        client.invoke_endpoint(EndpointName="llm", ContentType="application/json", Body=b'{"prompt": "x"}', **kwargs)


@pytest.mark.parametrize("operation", ["stream", "whole"])
def test_scaled_to_zero_answers_sagemakers_no_capacity_error_until_the_copy_is_up(
    sim: SimulatedEndpoint, client: Any, operation: str
) -> None:
    sim.set_scenario(scaled_to_zero_s=0.5)
    with pytest.raises(ClientError) as caught:
        call(client, operation, InferenceComponentName="qwen")
    assert caught.value.response["Error"] == {"Code": "ValidationError", "Message": NO_CAPACITY_MESSAGE}
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert (sim.records[-1].fault, sim.records[-1].status) == ("no_capacity", 400)
    time.sleep(0.6)
    call(client, operation, InferenceComponentName="qwen")
    assert sim.records[-1].status == 200


def test_scaled_to_zero_names_leave_the_other_targets_warm(sim: SimulatedEndpoint, client: Any) -> None:
    sim.clear_records()
    sim.set_scenario(scaled_to_zero_s=30, scaled_to_zero_names=["qwen"])
    with pytest.raises(ClientError):
        call(client, "stream", InferenceComponentName="qwen")
    call(client, "stream", InferenceComponentName="llama")
    assert [r.status for r in sim.records] == [400, 200]
    assert sim.set_scenario(scaled_to_zero_names=["llm"]).to_json()["scaled_to_zero_names"] == ["llm"]
    with pytest.raises(ClientError):
        call(client, "whole")


def test_throttle_every_kth_call_counts_from_when_it_was_set(sim: SimulatedEndpoint, client: Any) -> None:
    call(client, "stream")
    sim.clear_records()
    sim.set_scenario(throttle_every=3)
    throttled = []
    for n in range(7):
        try:
            call(client, "stream" if n % 2 else "whole")
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ThrottlingException"
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            throttled.append(n + 1)
    assert throttled == [3, 6] and [r.fault for r in sim.records].count("throttling") == 2


def test_unknown_endpoint_is_a_validation_error(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(endpoint_names=["llm"])
    with pytest.raises(ClientError) as caught:
        client.invoke_endpoint_with_response_stream(EndpointName="nope", ContentType="application/json", Body=b"{}")
    assert caught.value.response["Error"] == {
        "Code": "ValidationError",
        "Message": "Endpoint nope of account 123456789012 not found.",
    }
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize(
    ("fault", "code"),
    [("model_stream_error", "ModelStreamError"), ("internal_stream_failure", "InternalStreamFailure")],
)
def test_stream_exceptions_arrive_after_fault_after_tokens(
    sim: SimulatedEndpoint, client: Any, fault: str, code: str
) -> None:
    sim.set_scenario(fault=fault, fault_after=4)
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(REQUESTS["openai"])
    )
    received = []
    with pytest.raises(EventStreamError) as caught:
        for event in response["Body"]:
            received.append(event["PayloadPart"]["Bytes"])
    assert caught.value.response["Error"]["Code"] == code
    assert len(received) == 5, "the role chunk and four tokens"
    assert len(sim.records[-1].tokens) == 4


def test_fault_after_zero_comes_before_the_first_payload_part(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(fault="model_stream_error", fault_after=0)
    with pytest.raises(EventStreamError):
        stream(client, REQUESTS["openai"])
    assert sim.records[-1].tokens == []


def test_reset_is_a_tcp_rst(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(fault="reset", fault_after=2)
    with pytest.raises(ProtocolError, match="reset"):
        stream(client, REQUESTS["openai"])
    assert sim.records[-1].outcome == "reset"


def test_missing_or_foreign_sigv4_is_403(sim: SimulatedEndpoint) -> None:
    body = json.dumps(REQUESTS["openai"]).encode()
    path = "/endpoints/llm/invocations-response-stream"
    unsigned = raw_post(sim, path, body, {"Content-Type": "application/json"})
    assert unsigned.status == 403
    assert unsigned.getheader("x-amzn-ErrorType").startswith("MissingAuthenticationTokenException")
    foreign = {**SIGV4_HEADERS, "Authorization": SIGV4_HEADERS["Authorization"].replace("/sagemaker/", "/s3/")}
    assert raw_post(sim, path, body, foreign).status == 403
    undated = {k: v for k, v in SIGV4_HEADERS.items() if k != "X-Amz-Date"}
    assert raw_post(sim, path, body, undated).status == 403


def test_variant_and_component_headers_are_recorded_and_echoed(sim: SimulatedEndpoint, client: Any) -> None:
    _, response = stream(
        client, REQUESTS["openai"], TargetVariant="blue", InferenceComponentName="llama-ic", Accept="application/json"
    )
    assert response["InvokedProductionVariant"] == "blue"
    record = sim.records[-1]
    assert (record.target_variant, record.inference_component) == ("blue", "llama-ic")
    assert record.content_type == "application/json" and record.accept == "application/json"
    assert record.endpoint == "llm"
    assert record.request == REQUESTS["openai"]


# ---------------------------------------------------------------------------------- timing and closing


def test_payload_parts_arrive_at_the_token_cadence(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(dialect="lmi", ttft_ms=50, cadence_ms=20, tokens=10)
    started = time.monotonic()
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(REQUESTS["lmi"])
    )
    arrivals = [time.monotonic() for _ in response["Body"]]
    assert len(arrivals) == 10
    assert arrivals[0] - started >= 0.04
    assert arrivals[-1] - arrivals[0] >= 0.12, "nine 20 ms gaps, not one burst"
    # no two PayloadParts came together: each gap is most of a cadence step
    assert sum(1 for a, b in itertools.pairwise(arrivals) if b - a > 0.01) >= 7
    sends = [t.monotonic_ns for t in sim.records[-1].tokens]
    assert [t.index for t in sim.records[-1].tokens] == list(range(10))
    assert (sends[-1] - sends[0]) / 1e6 >= 150
    assert all(abs(t.wall_ns - time.time_ns()) < 10e9 for t in sim.records[-1].tokens)


def test_a_client_that_closes_early_is_recorded_as_closed(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(cadence_ms=50, tokens=100)
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(REQUESTS["openai"])
    )
    events = iter(response["Body"])
    next(events), next(events), next(events)
    response["Body"].close()
    closed_at = time.monotonic_ns()
    record = sim.wait_for_record(lambda r: r.outcome == "client_closed", timeout=2)
    assert record.ended_monotonic_ns is not None
    assert (record.ended_monotonic_ns - closed_at) / 1e6 < 40, "noticed between two token sends"
    assert len(record.tokens) < 10


def test_a_stalled_stream_waits_for_the_client_to_go(sim: SimulatedEndpoint, client: Any) -> None:
    sim.set_scenario(fault="stall", fault_after=2)
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="llm", ContentType="application/json", Body=json.dumps(REQUESTS["openai"])
    )
    events = iter(response["Body"])
    next(events), next(events), next(events)
    time.sleep(0.1)
    assert sim.records[-1].outcome == "streaming"
    response["Body"].close()
    record = sim.wait_for_record(lambda r: r.fault == "stall" and r.outcome == "client_closed", timeout=2)
    assert len(record.tokens) == 2


# ------------------------------------------------------------------------------------------ control API


def test_control_api_updates_resets_and_reports(sim: SimulatedEndpoint) -> None:
    def call(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        host, port = sim.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request(method, path, json.dumps(body).encode() if body is not None else None)
        response = conn.getresponse()
        return response.status, json.loads(response.read())

    status, scenario = call("POST", "/_sim/scenario", {"dialect": "tgi", "cadence_ms": 5})
    assert status == 200 and scenario["dialect"] == "tgi" and scenario["tokens"] == FAST.tokens
    assert sim.scenario.cadence_ms == 5
    assert call("POST", "/_sim/scenario", {"dialect": "klingon"})[0] == 400
    assert call("POST", "/_sim/scenario", {"no_such_field": 1})[0] == 400
    assert call("POST", "/_sim/scenario", {"tokens": "10"})[0] == 400
    assert call("DELETE", "/_sim/scenario")[1] == FAST.to_json()

    raw_post(sim, "/endpoints/llm/invocations", b'{"prompt": "records"}', SIGV4_HEADERS).read()
    # The server notes the outcome just after the last byte: read at once, it may still say 'streaming'.
    sim.wait_for_record(lambda r: r.body == b'{"prompt": "records"}' and r.outcome != "streaming")
    status, records = call("GET", "/_sim/records")
    assert status == 200
    assert records[-1]["operation"] == "InvokeEndpoint" and records[-1]["body"] == '{"prompt": "records"}'
    assert records[-1]["received_wall_ns"] > 0 and records[-1]["outcome"] == "completed"


def test_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        SimulatedEndpoint(host="0.0.0.0")


ENDPOINT_MODULES = [
    importlib.import_module(f"sagestream_local.endpoint.{m.name}")
    for m in pkgutil.iter_modules(sagestream_local.endpoint.__path__)
    if m.name != "__main__"  # the CLI serves until interrupted: its test below asks for its help
]


@pytest.mark.parametrize("module", [sagestream_local.endpoint, *ENDPOINT_MODULES], ids=lambda m: m.__name__)
def test_every_module_of_the_endpoint_shows_how_it_is_used(module: ModuleType) -> None:
    # The package's and the server's examples open loopback sockets, which is why they run here.
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0, f"{module.__name__} has no runnable example"


def test_the_package_names_every_public_name_of_its_modules() -> None:
    # `from sagestream_local.endpoint import X` is how the tests, the bench and the local stack import it.
    public = {
        name
        for module in ENDPOINT_MODULES
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", module.__name__) == module.__name__
        and not isinstance(value, ModuleType)
    }
    assert sorted(public - set(sagestream_local.endpoint.__all__)) == []


def test_the_standalone_cli_offers_every_scenario_field_as_a_flag() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "sagestream_local.endpoint", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert help_text.startswith("usage: python -m sagestream_local.endpoint")
    # A field whose default is None (endpoint_names, context_length) has no type to parse a flag with.
    defaults = Scenario()
    flags = {
        "--" + f.name.replace("_", "-") for f in dataclasses.fields(Scenario) if getattr(defaults, f.name) is not None
    }
    assert [flag for flag in sorted(flags) if flag not in help_text] == []


def test_a_client_resetting_a_kept_alive_connection_leaves_no_traceback(
    sim: SimulatedEndpoint, capfd: pytest.CaptureFixture[str]
) -> None:
    import socket
    import struct
    from urllib.parse import urlsplit

    address = urlsplit(sim.url)
    for _ in range(3):
        conn = socket.create_connection((address.hostname, address.port))
        conn.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.recv(65536)  # the answer; the connection stays open for the next request
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset, as an idle pooled connection gets from a client that exits
    time.sleep(0.3)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err
