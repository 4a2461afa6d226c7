"""Holding a request while its model has no capacity, and falling back to the model's other upstreams."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sagestream import capacity
from sagestream.capacity import Held, backoff_s, cooling, first_answer
from sagestream.config import Config, Fallback
from sagestream.errors import APIError
from sagestream.faults import DeadlineReached, error_from
from sagestream.lambda_runtime import ClientDisconnected

NO_CAPACITY = APIError.upstream(503, "no copy running", code="no_capacity", headers={"Retry-After": "30"})
THROTTLED = APIError.upstream(429, "busy", code="rate_limited")
FAILED = APIError.upstream(502, "the endpoint failed", code="upstream_error")
REFUSED = APIError.upstream(400, "bad request", code="upstream_validation_error")


@pytest.fixture(autouse=True)
def _fresh_cooldowns() -> Iterator[None]:
    capacity.forget_cooldowns()
    capacity.forget_breakers()  # module level too: each test meets closed breakers
    yield
    capacity.forget_cooldowns()
    capacity.forget_breakers()


class Upstreams:
    """Each upstream's answers in turn (an APIError is raised; the last answer repeats), and the calls made."""

    def __init__(self, **answers: list[object]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, target: Config) -> str:
        self.calls.append(target.endpoint_name)
        queue = self.answers[target.endpoint_name]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return str(answer)


class Waits:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(seconds)


def model(*fallbacks: str, cold_wait_s: float = 0.0, cooldown_s: float = 30.0) -> Config:
    return Config(
        endpoint_name="big",
        cold_wait_s=cold_wait_s,
        fallback_cooldown_s=cooldown_s,
        fallbacks=tuple(Fallback(f) for f in fallbacks),
    )


def soon(seconds: float = 30.0) -> float:
    return time.monotonic() + seconds


def test_without_holding_a_cold_model_is_its_503_after_one_call() -> None:
    upstreams, held = Upstreams(big=[NO_CAPACITY]), Held()
    with pytest.raises(APIError) as refused:
        first_answer(upstreams, model().upstreams, held, deadline=soon(), wait=Waits())
    assert refused.value is NO_CAPACITY and refused.value.headers["Retry-After"] == "30"
    assert upstreams.calls == ["big"] and held.rounds == 0


def test_a_held_request_is_retried_with_backoff_until_a_copy_answers() -> None:
    upstreams, held, waits = Upstreams(big=[NO_CAPACITY, NO_CAPACITY, THROTTLED, "tokens"]), Held(), Waits()
    answer = first_answer(upstreams, model(cold_wait_s=30).upstreams, held, deadline=soon(), wait=waits)
    assert answer == "tokens" and upstreams.calls == ["big"] * 4
    assert held.rounds == 3 and len(waits.delays) == 3
    # full jitter over 0.5, 1, 2 s: never more than each round's cap
    assert all(0 <= d <= cap for d, cap in zip(waits.delays, (0.5, 1.0, 2.0), strict=True)), waits.delays
    assert held.waited_s >= sum(waits.delays) and (held.target, held.fallback) == ("big", False)


def test_the_wait_ends_at_cold_wait_s_with_the_capacity_fault() -> None:
    upstreams, held = Upstreams(big=[NO_CAPACITY]), Held()
    started = time.monotonic()
    with pytest.raises(APIError) as refused:
        first_answer(upstreams, model(cold_wait_s=1.0).upstreams, held, deadline=soon(), wait=Waits())
    took = time.monotonic() - started
    assert refused.value.code == "no_capacity" and 1.0 <= took < 1.6, took
    assert held.rounds >= 1 and 1.0 <= held.waited_s < 1.6


def test_the_deadline_wins_over_cold_wait_s_and_no_round_starts_past_it() -> None:
    upstreams, held = Upstreams(big=[NO_CAPACITY]), Held()
    deadline = soon(1.5)
    asked_at: list[float] = []

    def call(target: Config) -> str:
        asked_at.append(time.monotonic())
        return upstreams(target)

    with pytest.raises(APIError) as refused:
        first_answer(call, model(cold_wait_s=600).upstreams, held, deadline=deadline, wait=Waits())
    assert refused.value.code == "no_capacity"
    assert time.monotonic() < deadline and all(t < deadline - 0.5 for t in asked_at), "a round that could not finish"


def test_a_client_that_leaves_stops_the_retries() -> None:
    upstreams = Upstreams(big=[NO_CAPACITY])

    def wait(seconds: float) -> None:
        raise ClientDisconnected("the caller has gone away")

    with pytest.raises(ClientDisconnected):
        first_answer(upstreams, model(cold_wait_s=60).upstreams, Held(), deadline=soon(), wait=wait)
    assert upstreams.calls == ["big"]


@pytest.mark.parametrize("fault", [REFUSED, error_from(DeadlineReached())])
def test_a_fault_that_capacity_cannot_change_is_answered_at_once(fault: APIError) -> None:
    upstreams = Upstreams(big=[fault], small=["tokens"])
    with pytest.raises(APIError) as refused:
        first_answer(upstreams, model("small", cold_wait_s=60).upstreams, Held(), deadline=soon(), wait=Waits())
    assert refused.value is fault and upstreams.calls == ["big"]


def test_a_5xx_of_the_only_upstream_is_not_held() -> None:
    upstreams = Upstreams(big=[FAILED])
    with pytest.raises(APIError) as refused:
        first_answer(upstreams, model(cold_wait_s=60).upstreams, Held(), deadline=soon(), wait=Waits())
    assert refused.value is FAILED and upstreams.calls == ["big"]


@pytest.mark.parametrize("fault", [NO_CAPACITY, THROTTLED, FAILED])
def test_a_fallback_serves_when_the_models_own_upstream_cannot(fault: APIError) -> None:
    upstreams, held = Upstreams(big=[fault], small=["tokens"]), Held()
    assert first_answer(upstreams, model("small").upstreams, held, deadline=soon(), wait=Waits()) == "tokens"
    assert upstreams.calls == ["big", "small"] and (held.target, held.fallback, held.rounds) == ("small", True, 0)


def test_a_cold_upstream_cools_down_and_is_asked_again_after_it() -> None:
    upstreams = Upstreams(big=[NO_CAPACITY, "from big"], small=["from small"])
    cfg = model("small", cooldown_s=0.3)

    def ask() -> str:
        return first_answer(upstreams, cfg.upstreams, Held(), deadline=soon(), wait=Waits())

    assert ask() == "from small" and cooling("big")
    assert ask() == "from small", "within the cooldown the cold upstream is skipped"
    assert upstreams.calls == ["big", "small", "small"]
    time.sleep(0.35)
    assert not cooling("big") and ask() == "from big"
    assert upstreams.calls == ["big", "small", "small", "big"]


def test_when_every_upstream_is_cold_the_request_is_held_over_all_of_them() -> None:
    upstreams = Upstreams(big=[NO_CAPACITY, NO_CAPACITY, "from big"], small=[THROTTLED])
    held = Held()
    cfg = model("small", cold_wait_s=30, cooldown_s=0.0)
    assert first_answer(upstreams, cfg.upstreams, held, deadline=soon(), wait=Waits()) == "from big"
    assert upstreams.calls == ["big", "small", "big", "small", "big"] and held.rounds == 2
    assert (held.target, held.fallback) == ("big", False)


def test_refused_everywhere_the_client_gets_the_capacity_fault_and_its_retry_after() -> None:
    upstreams = Upstreams(big=[NO_CAPACITY], small=[FAILED])
    with pytest.raises(APIError) as refused:
        first_answer(upstreams, model("small").upstreams, Held(), deadline=soon(), wait=Waits())
    assert refused.value is NO_CAPACITY


def test_all_cooling_asks_the_one_whose_cooldown_ends_first() -> None:
    upstreams = Upstreams(big=[NO_CAPACITY, "from big"], small=[NO_CAPACITY])
    cfg = model("small", cooldown_s=30)
    with pytest.raises(APIError):
        first_answer(upstreams, cfg.upstreams, Held(), deadline=soon(), wait=Waits())
    assert cooling("big") and cooling("small")
    assert first_answer(upstreams, cfg.upstreams, Held(), deadline=soon(), wait=Waits()) == "from big"
    assert upstreams.calls == ["big", "small", "big"], "big cooled first, so its cooldown ends first: only it is asked"


def test_backoff_is_full_jitter_over_a_capped_exponential() -> None:
    assert [backoff_s(n, rand=lambda: 1.0) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_s(4, rand=lambda: 0.0) == 0.0
    assert all(0 <= backoff_s(3) <= 4.0 for _ in range(200))
