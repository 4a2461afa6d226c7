"""The invocation loop's parts that need no Runtime API (tests/protocol/test_runtime*.py run the loop)."""

from __future__ import annotations

import threading

import pytest

from sagestream.lambda_runtime.loop import InFlight, load_handler, max_concurrency


@pytest.mark.parametrize(("value", "said"), [("0", "below 1"), ("-3", "below 1"), ("many", "not a whole number")])
def test_a_concurrency_that_is_no_count_is_refused_by_name(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        max_concurrency(value)


def test_a_handler_is_module_dot_function_and_must_be_callable() -> None:
    assert load_handler("tests.handlers.echo").__name__ == "echo"
    with pytest.raises(ValueError, match=r"module\.function"):
        load_handler("echo")
    with pytest.raises(TypeError, match="not callable"):
        load_handler("sagestream.lambda_runtime.loop.DEFAULT_HANDLER")
    with pytest.raises(AttributeError):
        load_handler("tests.handlers.no_such_handler")


def test_in_flight_waits_until_the_last_invocation_ends() -> None:
    in_flight = InFlight()
    entered, leave = threading.Event(), threading.Event()

    def one() -> None:
        with in_flight:
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=one)
    thread.start()
    entered.wait(10)
    assert in_flight.wait_idle(timeout=0.05) is False
    leave.set()
    assert in_flight.wait_idle(timeout=10) is True
    thread.join(10)
