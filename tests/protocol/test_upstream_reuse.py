"""A relay that stops at the model's last event still leaves the upstream connection reusable.

Closing a response a few bytes before its body ended used to drop the connection, so every invocation
paid a new TCP (on AWS, TCP and TLS) handshake before its first token.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import upstream
from sagestream.config import Config
from sagestream_local.endpoint import Scenario, SimulatedEndpoint


@pytest.fixture
def counted() -> Iterator[tuple[SimulatedEndpoint, list[int]]]:
    sim = SimulatedEndpoint(Scenario(ttft_ms=0, cadence_ms=0, tokens=5))
    connections = [0]
    accept = sim._server.process_request

    def count(request: Any, address: Any) -> None:
        connections[0] += 1
        accept(request, address)

    sim._server.process_request = count  # type: ignore[method-assign]
    with sim:
        yield sim, connections


@pytest.fixture
def client(counted: tuple[SimulatedEndpoint, list[int]], monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", counted[0].url)
    return upstream.make_client(Config(endpoint_name="llm"))


BODY = b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}'


def test_stopping_at_done_keeps_the_connection(client: Any, counted: tuple[SimulatedEndpoint, list[int]]) -> None:
    for _ in range(3):
        with upstream.open_stream(client, Config(endpoint_name="llm"), BODY) as parts:
            for part in parts:
                if b"[DONE]" in part:
                    break  # what the relay does once its decoder is done
    assert counted[1][0] == 1


def test_closing_a_live_stream_still_ends_it(client: Any, counted: tuple[SimulatedEndpoint, list[int]]) -> None:
    sim = counted[0]
    sim.set_scenario(tokens=200, cadence_ms=20)
    with upstream.open_stream(client, Config(endpoint_name="llm"), BODY) as parts:
        next(iter(parts))
    record = sim.wait_for_record(lambda r: r.outcome != "streaming", timeout=5)
    assert record.outcome == "client_closed" and len(record.tokens) < 200
