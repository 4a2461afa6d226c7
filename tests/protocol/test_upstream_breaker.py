"""botocore's own retries and the circuit breaker, over a loopback socket to the simulated endpoint: each retried
attempt counts against the target's breaker, none goes once it is open, a probe is one call, and SageMaker's
InternalFailure is not retried at all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import breaker, capacity, upstream
from sagestream.breaker import OPEN, OPENED, BreakerOpen
from sagestream.capacity import Held, first_answer
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream_local.endpoint import Scenario, SimulatedEndpoint

BODY = b'{"messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> Iterator[SimulatedEndpoint]:
    breaker.forget_breakers()
    with SimulatedEndpoint(Scenario(ttft_ms=0, cadence_ms=0, tokens=3)) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
        yield endpoint
    breaker.forget_breakers()


def config(failures: int = 5) -> Config:
    return Config(endpoint_name="llm", max_attempts=3, breaker_failures=failures, breaker_cooldown_s=60.0)


def whole(client: Any, cfg: Config, held: Held) -> Any:
    deadline = time.monotonic() + 30
    return first_answer(
        lambda target: upstream.invoke(client, target, BODY, deadline=deadline),
        cfg.upstreams,
        held,
        deadline=deadline,
        wait=time.sleep,
    )


def test_botocores_retries_count_and_stop_when_the_breaker_opens(sim: SimulatedEndpoint) -> None:
    cfg = config(failures=5)
    client = upstream.make_client(cfg)  # as at init: the retry hook reads the call's ticket
    sim.set_scenario(fault="http_503")
    first, second, third = Held(), Held(), Held()
    with pytest.raises(APIError) as one:
        whole(client, cfg, first)
    assert one.value.code == "service_unavailable" and len(sim.records) == 3, "UPSTREAM_MAX_ATTEMPTS calls"
    with pytest.raises(APIError) as two:
        whole(client, cfg, second)
    assert len(sim.records) == 5, "the fifth attempt opened the breaker: no sixth"
    assert second.breaker == OPENED and two.value.headers["Retry-After"] == "60"
    with pytest.raises(BreakerOpen):
        whole(client, cfg, third)
    assert len(sim.records) == 5 and third.breaker == OPEN


def test_a_probe_is_one_call(sim: SimulatedEndpoint) -> None:
    cfg = config(failures=1)
    client = upstream.make_client(cfg)
    sim.set_scenario(fault="http_503")
    with pytest.raises(APIError):
        whole(client, cfg, Held())
    assert len(sim.records) == 1, "the first failed attempt opened it"
    target = breaker.breaker_for(capacity.target_name(cfg), cfg)
    assert target is not None
    target._until = time.monotonic()  # the cooldown is over (60 s is the test's, not waited for)
    probe = Held()
    with pytest.raises(APIError) as failed:
        whole(client, cfg, probe)
    assert failed.value.code == "service_unavailable" and probe.breaker == OPENED and len(sim.records) == 2
    target._until = time.monotonic()
    sim.set_scenario(fault="none")
    healed = Held()
    assert whole(client, cfg, healed) and healed.breaker == "half_open" and target.state == "closed"


@pytest.mark.parametrize("failures", [0, 5], ids=["breaker-off", "breaker-on"])
def test_internal_failure_is_not_retried(sim: SimulatedEndpoint, failures: int) -> None:
    cfg = config(failures=failures)
    client = upstream.make_client(cfg)
    sim.set_scenario(fault="http_500")
    for calls in (1, 2):
        with pytest.raises(APIError) as failed:
            whole(client, cfg, Held())
        assert (failed.value.status, failed.value.code) == (502, "upstream_error")
        assert len(sim.records) == calls, "the endpoint failed the request itself: asked once"


def test_a_clients_4xx_is_neither_retried_nor_counted(sim: SimulatedEndpoint) -> None:
    cfg = config(failures=2)
    client = upstream.make_client(cfg)
    sim.set_scenario(fault="http_424")  # the container's own 4xx, wrapped in SageMaker's ModelError
    for _ in range(4):
        with pytest.raises(APIError) as refused:
            whole(client, cfg, Held())
        assert refused.value.status < 500
    assert len(sim.records) == 4


def test_a_whole_answers_probe_closes_the_breaker_at_the_answers_head(sim: SimulatedEndpoint) -> None:
    cfg = config(failures=1)
    client = upstream.make_client(cfg)
    sim.set_scenario(fault="http_503")
    with pytest.raises(APIError):
        whole(client, cfg, Held())
    target = breaker.breaker_for(capacity.target_name(cfg), cfg)
    assert target is not None
    target._until = time.monotonic()
    sim.set_scenario(fault="none", framing="close", tokens=3)
    probe = target.ask()
    token = breaker.calling.set(probe)
    try:
        response = client.invoke_endpoint(EndpointName="llm", Body=BODY, ContentType="application/json")
        assert target.state == "closed", "closed by the head, before the body is read"
        response["Body"].read()
    finally:
        breaker.calling.reset(token)
