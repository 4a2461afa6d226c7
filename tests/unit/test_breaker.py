"""The circuit breaker per upstream target: closed, open, half-open and back, one probe at a time, and what counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import msgspec
import pytest

from sagestream import breaker, capacity
from sagestream.breaker import CLOSED, HALF_OPEN, OPEN, OPENED, Breaker, BreakerOpen, Ticket, trouble
from sagestream.capacity import Held, first_answer
from sagestream.config import Config, Fallback
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.record import StreamRecord
from sagestream.telemetry import Labels, invocation_fields, invocation_metrics

FAILED = APIError.upstream(502, "The model endpoint failed.", code="upstream_error")
UNAVAILABLE = APIError.upstream(503, "The model endpoint is not available right now.", code="service_unavailable")
NO_CAPACITY = APIError.upstream(503, "no copy running", code="no_capacity", headers={"Retry-After": "30"})
THROTTLED = APIError.upstream(429, "busy", code="rate_limited")
TOO_LONG = APIError.upstream(400, "the prompt is too long", code="context_length_exceeded")
REFUSED = APIError.upstream(422, "missing field", code="model_error")
DEADLINE = APIError.upstream(504, "the function's time ran out", code=DEADLINE_EXCEEDED)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(clock: Clock, failures: int = 3, cooldown_s: float = 10.0, max_cooldown_s: float = 35.0) -> Breaker:
    return Breaker(failures=failures, cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s, clock=clock)


def fail(b: Breaker, err: APIError, times: int = 1) -> list[Ticket]:
    tickets = [b.ask() for _ in range(times)]
    for ticket in tickets:
        ticket.failed(err)
    return tickets


def refusal(b: Breaker) -> BreakerOpen:
    with pytest.raises(BreakerOpen) as refused:
        b.ask()
    return refused.value


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    breaker.forget_breakers()
    capacity.forget_cooldowns()
    yield
    breaker.forget_breakers()
    capacity.forget_cooldowns()


# --- the state machine --------------------------------------------------------------------------------------


def test_a_run_of_failures_opens_it_and_it_then_refuses_with_the_cooldown_left(clock: Clock) -> None:
    b = make(clock)
    tickets = fail(b, FAILED, 2)
    assert b.state == CLOSED and [t.event for t in tickets] == [None, None]
    (third,) = fail(b, UNAVAILABLE)
    assert b.state == OPEN and third.event == OPENED
    clock.now += 3.5
    refused = refusal(b)
    assert (refused.status, refused.type, refused.code) == (503, "server_error", "breaker_open")
    assert refused.headers == {"Retry-After": "7", "retry-after-ms": "7000", "x-should-retry": "true"}
    assert "service_unavailable" in refused.message and not refused.capacity


def test_an_answer_resets_the_run(clock: Clock) -> None:
    b = make(clock)
    fail(b, FAILED, 2)
    b.ask().answered()
    fail(b, FAILED, 2)
    assert b.state == CLOSED


@pytest.mark.parametrize("err", [TOO_LONG, REFUSED, DEADLINE, APIError.internal()], ids=lambda e: e.code)
def test_a_client_4xx_the_deadline_and_the_functions_own_500_never_count(clock: Clock, err: APIError) -> None:
    b = make(clock)
    fail(b, err, 20)
    assert b.state == CLOSED and not trouble(err)
    fail(b, FAILED, 2)
    fail(b, err, 5)  # nor do they break a run of failures: the endpoint said nothing either way
    fail(b, FAILED)
    assert b.state == OPEN


@pytest.mark.parametrize("err", [NO_CAPACITY, THROTTLED, UNAVAILABLE, FAILED], ids=lambda e: e.code)
def test_capacity_faults_and_5xx_count(clock: Clock, err: APIError) -> None:
    b = make(clock)
    fail(b, err, 3)
    assert b.state == OPEN and refusal(b).capacity == (err.code in ("no_capacity", "rate_limited"))


def test_after_the_cooldown_one_probe_whose_answer_closes_it(clock: Clock) -> None:
    b = make(clock)
    fail(b, FAILED, 3)
    clock.now += 10.0
    probe = b.ask()
    assert probe.probe and probe.event == HALF_OPEN and b.state == HALF_OPEN
    assert refusal(b).headers["Retry-After"] == "1", "others wait for the probe's answer"
    probe.answered()
    assert b.state == CLOSED
    assert not b.ask().probe


def test_a_failed_probe_reopens_it_for_twice_as_long_up_to_the_longest(clock: Clock) -> None:
    b = make(clock)
    fail(b, FAILED, 3)
    lefts = []
    for _ in range(4):
        clock.now += b.left_s()
        (probe,) = fail(b, FAILED)
        assert probe.event == OPENED and b.state == OPEN
        lefts.append(b.left_s())
    assert lefts == [20.0, 35.0, 35.0, 35.0]
    clock.now += 35.0
    b.ask().answered()
    fail(b, FAILED, 3)
    assert b.left_s() == 10.0, "closed, it starts again from the first cooldown"


def test_a_breaker_opened_on_capacity_keeps_its_first_cooldown(clock: Clock) -> None:
    b = make(clock)
    fail(b, NO_CAPACITY, 3)
    for _ in range(3):
        clock.now += b.left_s()
        fail(b, NO_CAPACITY)
        assert b.left_s() == 10.0, "a copy starting is noticed within a cooldown, however long it takes"


def test_a_probe_without_a_verdict_leaves_the_next_call_to_probe(clock: Clock) -> None:
    b = make(clock)
    fail(b, FAILED, 3)
    clock.now += 10.0
    b.ask().failed(TOO_LONG)  # the endpoint's 4xx: not a verdict on its health
    assert b.state == HALF_OPEN
    gone = b.ask()
    gone.ended()  # the client left before an answer
    second = b.ask()
    assert second.probe
    second.answered()
    assert b.state == CLOSED


def test_one_probe_at_a_time_under_concurrent_callers(clock: Clock) -> None:
    b = make(clock)
    fail(b, FAILED, 3)
    clock.now += 10.0
    callers = 32
    start = threading.Barrier(callers)
    probes: list[Ticket] = []
    refused: list[BreakerOpen] = []
    lock = threading.Lock()

    def call() -> None:
        start.wait()
        try:
            ticket = b.ask()
        except BreakerOpen as err:
            with lock:
                refused.append(err)
            return
        with lock:
            probes.append(ticket)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(probes) == 1 and len(refused) == callers - 1 and probes[0].probe


def test_a_call_let_through_before_it_opened_changes_nothing_after(clock: Clock) -> None:
    b = make(clock)
    late = b.ask()
    fail(b, FAILED, 3)
    late.answered()
    assert b.state == OPEN, "only the probe's answer closes it"


def test_only_the_first_report_of_a_ticket_counts(clock: Clock) -> None:
    b = make(clock)
    ticket = b.ask()
    ticket.failed(FAILED)
    ticket.failed(FAILED)
    ticket.ended()
    fail(b, FAILED)
    assert b.state == CLOSED


# --- the function's own retries -------------------------------------------------------------------------------


def test_each_retried_attempt_counts_and_none_goes_once_it_is_open(clock: Clock) -> None:
    b = make(clock)
    first = b.ask()
    assert first.may_retry(UNAVAILABLE) and first.may_retry(UNAVAILABLE)
    assert not first.may_retry(UNAVAILABLE), "the third failed attempt opened it: no fourth"
    assert b.state == OPEN and first.event == OPENED
    first.failed(UNAVAILABLE)  # the call's end: counted already
    clock.now += 10.0
    probe = b.ask()
    assert not probe.may_retry(UNAVAILABLE), "a probe is one call"
    assert b.state == OPEN and probe.event == OPENED


def test_a_retry_stops_when_others_opened_it_meanwhile(clock: Clock) -> None:
    b = make(clock)
    slow = b.ask()
    fail(b, FAILED, 3)
    assert not slow.may_retry(UNAVAILABLE) and slow.event is None


# --- through capacity.first_answer ------------------------------------------------------------------------------


class Upstreams:
    def __init__(self, **answers: object) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, target: Config) -> str:
        self.calls.append(target.endpoint_name)
        answer = self.answers[target.endpoint_name]
        if isinstance(answer, BaseException):
            raise answer
        return str(answer)


def model(*fallbacks: str, cold_wait_s: float = 0.0, failures: int = 2) -> Config:
    return Config(
        endpoint_name="big",
        cold_wait_s=cold_wait_s,
        fallbacks=tuple(Fallback(f) for f in fallbacks),
        breaker_failures=failures,
        breaker_cooldown_s=30.0,
    )


def ask(upstreams: Upstreams, cfg: Config, held: Held | None = None) -> str:
    return first_answer(upstreams, cfg.upstreams, held or Held(), deadline=1e12, wait=lambda s: None)


def test_an_open_target_is_not_called_and_the_client_gets_the_503_with_retry_after() -> None:
    upstreams, cfg = Upstreams(big=FAILED), model()
    for _ in range(2):
        with pytest.raises(APIError) as failed:
            ask(upstreams, cfg)
        assert failed.value is FAILED
    held = Held()
    with pytest.raises(BreakerOpen) as refused:
        ask(upstreams, cfg, held)
    assert upstreams.calls == ["big", "big"] and held.breaker == OPEN
    assert refused.value.headers["Retry-After"] == "30"
    record = StreamRecord()
    record.fail(refused.value)
    assert (record.status, record.error_code, record.breaker) == (503, "breaker_open", OPEN)


def test_the_request_whose_failure_opened_it_is_told_so_and_when_to_come_back() -> None:
    def failing(target: Config) -> str:
        raise APIError.upstream(502, "The model endpoint failed.", code="upstream_error")

    cfg = model()
    helds, errors = [Held(), Held()], []
    for held in helds:
        with pytest.raises(APIError) as failed:
            first_answer(failing, cfg.upstreams, held, deadline=1e12, wait=lambda s: None)
        errors.append(failed.value)
    assert [h.breaker for h in helds] == [None, OPENED]
    assert errors[0].headers == {}
    assert (errors[1].status, errors[1].code) == (502, "upstream_error"), "its own fault, as it was"
    assert errors[1].headers == {"Retry-After": "30", "retry-after-ms": "30000", "x-should-retry": "true"}


def test_an_open_target_passes_to_the_fallback() -> None:
    upstreams, cfg = Upstreams(big=FAILED, small="answer from small"), model("small")
    assert ask(upstreams, cfg) == "answer from small"
    capacity.forget_cooldowns()  # the fallback cooldown would skip big anyway: the breaker must, without it
    assert ask(upstreams, cfg) == "answer from small"
    capacity.forget_cooldowns()
    held = Held()
    assert ask(upstreams, cfg, held) == "answer from small"
    assert upstreams.calls == ["big", "small", "big", "small", "small"] and held.breaker == OPEN


def test_a_breaker_off_calls_every_time() -> None:
    upstreams, cfg = Upstreams(big=FAILED), model(failures=0)
    for _ in range(5):
        with pytest.raises(APIError):
            ask(upstreams, cfg)
    assert upstreams.calls == ["big"] * 5


def test_a_held_request_waits_out_a_breaker_opened_on_capacity_and_ends_with_the_endpoints_own_fault() -> None:
    upstreams, cfg = Upstreams(big=NO_CAPACITY), model(cold_wait_s=0.3, failures=1)
    waits: list[float] = []

    def wait(seconds: float) -> None:  # the hold's own backoff, really waited (0.3 s in all)
        waits.append(seconds)
        time.sleep(seconds)

    with pytest.raises(APIError) as ended:
        first_answer(upstreams, cfg.upstreams, Held(), deadline=1e12, wait=wait)
    # its first call opened it; the rounds after were refused without a call, until the wait ran out
    assert upstreams.calls == ["big"] and len(waits) >= 1 and sum(waits) == pytest.approx(0.3, abs=0.05)
    assert ended.value.code == "no_capacity" and ended.value.headers["Retry-After"] == "30"
    # another held request, refused from its first round to the end of its wait, is told the same
    held = Held()
    with pytest.raises(APIError) as also:
        first_answer(upstreams, cfg.upstreams, held, deadline=1e12, wait=wait)
    assert upstreams.calls == ["big"] and held.rounds >= 1 and held.breaker == OPEN
    assert (also.value.status, also.value.code) == (503, "no_capacity") and also.value is not NO_CAPACITY
    held = Held()
    with pytest.raises(BreakerOpen):
        ask(upstreams, msgspec.structs.replace(cfg, cold_wait_s=0.0), held)  # not held: the breaker's 503 at once
    assert held.breaker == OPEN


def test_a_held_request_is_not_held_for_a_breaker_opened_on_failures() -> None:
    upstreams, cfg = Upstreams(big=FAILED), model(cold_wait_s=30)
    for _ in range(2):
        with pytest.raises(APIError):
            ask(upstreams, cfg)
    held = Held()
    with pytest.raises(BreakerOpen):
        ask(upstreams, cfg, held)
    assert held.rounds == 0


# --- what the operator sees -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("met", "opened", "refused"), [("opened", 1, 0), ("open", 0, 1), ("half_open", 0, 0), (None, None, None)]
)
def test_the_log_record_names_the_breaker_and_the_metrics_count_it(
    met: str | None, opened: int | None, refused: int | None
) -> None:
    record = StreamRecord(method="POST", path="/v1/chat/completions", kind="chat", started=0.0, breaker=met)
    fields = invocation_fields(record, Config(endpoint_name="llm"), ended=0.01, cold_start=False)
    assert fields.get("breaker") == met
    (main,) = invocation_metrics(
        record, Labels("sagestream", "sagestream"), ended=0.01, request_id="r", function_name="f", cold_start=False
    )
    assert (main.get("BreakerOpen"), main.get("BreakerRefusals")) == (
        None if opened is None else [opened],
        None if refused is None else [refused],
    )
