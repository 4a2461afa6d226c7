"""sagestream.answer: the answer's parts that the route tests do not reach one by one: the record and header
of a fallback, the keep-alives of a held stream, and what the route keeps once the answer is whole."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from sagestream import capacity
from sagestream.answer import TARGET_HEADER, KeepAlives, finish, first_answer
from sagestream.call import Call
from sagestream.config import Config, Fallback
from sagestream.errors import APIError
from sagestream.http import SSE_HEADERS, Request
from sagestream.protocols import Parsed
from sagestream.protocols.openai.request import ChatCompletionRequest
from tests.fakes import call_of

NO_CAPACITY = APIError.upstream(503, "no copy running", code="no_capacity", headers={"Retry-After": "30"})


@pytest.fixture(autouse=True)
def _fresh_cooldowns() -> Iterator[None]:
    capacity.forget_cooldowns()
    yield
    capacity.forget_cooldowns()


def call() -> Call:
    request = Request(method="POST", path="/v1/chat/completions", headers={}, body=b"{}")
    return call_of(request)


def parsed(finish: Any = None) -> Parsed:
    request = msgspec.convert({"messages": [{"role": "user", "content": "Hi"}]}, ChatCompletionRequest)
    return Parsed(request=request, original=request, finish=finish)


def test_a_fallback_that_served_is_named_on_the_record_and_the_response() -> None:
    asked = call()
    cfg = Config(endpoint_name="big", fallbacks=(Fallback("small"),))

    def ask(target: Config) -> str:
        if target.endpoint_name == "big":
            raise NO_CAPACITY
        return "tokens"

    assert first_answer(asked, cfg, ask, deadline=time.monotonic() + 30, wait=time.sleep) == "tokens"
    assert (asked.record.target, asked.record.fallback) == ("small", True)
    assert asked.writer.extra_headers == {TARGET_HEADER: "small"}


def test_a_model_without_fallbacks_names_no_target_and_a_refusal_still_reaches_the_caller() -> None:
    asked = call()

    def cold(target: Config) -> str:
        raise NO_CAPACITY

    with pytest.raises(APIError) as refused:
        first_answer(asked, Config(endpoint_name="big"), cold, deadline=time.monotonic() + 30, wait=time.sleep)
    assert refused.value.code == "no_capacity" and refused.value.headers["Retry-After"] == "30"
    assert asked.record.target is None and asked.writer.extra_headers == {}


def test_a_held_stream_gets_a_keep_alive_comment_every_interval_and_the_first_starts_it() -> None:
    asked = call()
    wait = KeepAlives(asked, SSE_HEADERS, every_s=0.05)
    wait(0.3)
    stream = asked.writer.stream
    assert stream.status == 200 and stream.headers["content-type"] == SSE_HEADERS["content-type"]
    assert 3 <= len(stream.writes) <= 6, stream.writes  # 0.3 s at one per 0.05 s, on a loaded host
    assert set(stream.writes) == {b": keep-alive\n\n"} and asked.record.keepalives == len(stream.writes)


def test_without_keep_alives_a_held_stream_writes_nothing_while_it_waits() -> None:
    asked = call()
    begun = time.monotonic()
    KeepAlives(asked, SSE_HEADERS, every_s=0)(0.05)
    assert time.monotonic() - begun >= 0.05 and not asked.writer.started


def test_a_whole_answer_is_kept_after_the_response_and_a_failure_to_keep_it_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kept: list[bytes] = []
    asked = call()
    finish(asked, parsed(kept.append), b'{"id":"resp_1"}')
    assert kept == [] and len(asked.after) == 1  # nothing before the response is closed
    asked.after[0]()
    assert kept == [b'{"id":"resp_1"}'] and asked.record.stored is True

    def broken(answer: bytes) -> None:
        raise OSError("the table is gone")

    failed = call()
    finish(failed, parsed(broken), b"{}")
    with caplog.at_level(logging.ERROR, logger="sagestream.answer"):
        failed.after[0]()
    assert failed.record.stored is False and "keeping the answer failed" in caplog.text


def test_nothing_is_kept_for_a_route_that_keeps_nothing_or_an_answer_that_failed() -> None:
    asked = call()
    finish(asked, parsed(), b"{}")
    finish(asked, parsed(lambda answer: pytest.fail("kept a failed answer")), None)
    assert asked.record.stored is None
