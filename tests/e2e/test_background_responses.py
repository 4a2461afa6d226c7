"""Background responses, resumed streams and cancel through the whole local chain: moto's DynamoDB as the store
and the stand-in of Lambda's asynchronous Invoke (``sagestream_local.lambda_invoke``) running the background run
in the stack's own runtime processes, as ``make run`` does. The openai SDK drives them: ``create(background=True)``
answers ``queued`` at once and the run completes; ``retrieve(id, stream=True, starting_after=N)`` replays the
events after N and follows to the end; ``cancel`` stops the run (the endpoint's stream is closed) and answers the
same twice; an OpenAI Agents SDK run in background mode completes."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.e2e.conftest import GetStack
from tests.e2e.test_anthropic_clients import loopback

MODEL = SIM_ENDPOINT_NAME


@pytest.fixture
def stored(stack_for: GetStack) -> LocalStack:
    # Three environments: a client that follows a run holds one, the run another.
    return stack_for(concurrency=3, RESPONSES_STORE="dynamodb", API_KEYS="k-alice,k-bob")


def client(stack: LocalStack, key: str = "k-alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=loopback(stack) + "/v1", api_key=key, max_retries=0, timeout=30)


def wait_until_done(sdk: openai.OpenAI, response_id: str, timeout_s: float = 20) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = sdk.responses.retrieve(response_id).status
        if status not in ("queued", "in_progress"):
            return str(status)
        time.sleep(0.1)
    raise AssertionError(f"{response_id} still running after {timeout_s} s")


def test_a_background_response_is_queued_at_once_and_completes_in_another_invocation(stored: LocalStack) -> None:
    assert stored.endpoint is not None
    stored.endpoint.set_scenario(ttft_ms=300, cadence_ms=5, tokens=20)
    sdk = client(stored)
    started = time.monotonic()
    queued = sdk.responses.create(model=MODEL, input="Tell me a story.", background=True)
    assert time.monotonic() - started < 3, "the queued response does not wait for the answer"
    assert queued.status == "queued" and queued.background is True and queued.output == []
    assert wait_until_done(sdk, queued.id) == "completed"
    done = sdk.responses.retrieve(queued.id)
    assert done.output_text and done.background is True and done.id == queued.id
    assert stored.lambda_invoke is not None and stored.lambda_invoke.queued >= 1
    # Stored as a foreground answer is: continued by its id.
    follow_up = sdk.responses.create(model=MODEL, input="And then?", previous_response_id=queued.id)
    assert follow_up.previous_response_id == queued.id
    sdk.responses.delete(queued.id)  # the response, and its run's events with it
    for call in (lambda: sdk.responses.retrieve(queued.id), lambda: sdk.responses.retrieve(queued.id, stream=True)):
        with pytest.raises(openai.NotFoundError):
            call()


def test_a_stream_is_replayed_after_a_sequence_number_and_followed_to_its_end(stored: LocalStack) -> None:
    assert stored.endpoint is not None
    stored.endpoint.set_scenario(ttft_ms=5, cadence_ms=40, tokens=30)  # about 1.2 s of tokens
    sdk = client(stored)
    queued = sdk.responses.create(model=MODEL, input="Count.", background=True)
    time.sleep(0.5)  # some events are written, more to come
    with sdk.responses.retrieve(queued.id, stream=True, starting_after=8) as events:
        seen = list(events)
    numbers = [event.sequence_number for event in seen]
    assert numbers == list(range(9, 9 + len(numbers))), "every event after 8, in order, none twice"
    assert seen[-1].type == "response.completed"
    text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    whole = sdk.responses.retrieve(queued.id).output_text
    assert whole.endswith(text) and len(text) < len(whole)
    again = list(sdk.responses.retrieve(queued.id, stream=True))  # after the end: the whole stream
    assert again[0].type == "response.created" and again[-1].type == "response.completed"


def test_a_background_stream_is_followed_in_the_request_that_started_it(stored: LocalStack) -> None:
    sdk = client(stored)
    with sdk.responses.stream(model=MODEL, input="Hi", background=True) as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and final.background is True and final.output_text


def test_a_foreground_stream_with_a_store_can_be_resumed_while_it_runs(stored: LocalStack) -> None:
    assert stored.endpoint is not None
    stored.endpoint.set_scenario(ttft_ms=5, cadence_ms=50, tokens=30)
    sdk = client(stored)
    with sdk.responses.create(model=MODEL, input="Hi", stream=True) as stream:
        first = [next(stream) for _ in range(6)]
        response_id = first[0].response.id  # type: ignore[union-attr]
        time.sleep(0.4)  # the first batch is written 0.25 s after its first event
        resumed = list(sdk.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
        rest = list(stream)
    assert [e.sequence_number for e in resumed] == [e.sequence_number for e in rest]
    assert resumed[-1].type == "response.completed"


def test_cancel_stops_the_run_and_answers_the_same_twice(stored: LocalStack) -> None:
    assert stored.endpoint is not None
    stored.endpoint.set_scenario(ttft_ms=5, cadence_ms=100, tokens=200)  # 20 s unless cancelled
    sdk = client(stored)
    queued = sdk.responses.create(model=MODEL, input="A long one.", background=True)
    deadline = time.monotonic() + 10
    while sdk.responses.retrieve(queued.id).status != "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    first = sdk.responses.cancel(queued.id)
    second = sdk.responses.cancel(queued.id)
    assert first.status == second.status == "cancelled" and first.id == second.id == queued.id
    deadline = time.monotonic() + 5
    record = stored.endpoint.records[-1]
    while record.outcome == "streaming" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.outcome == "client_closed", "the run closed the endpoint's stream"
    assert len(record.tokens) < 100
    assert sdk.responses.retrieve(queued.id).status == "cancelled"
    events = list(sdk.responses.retrieve(queued.id, stream=True))  # ends, with no terminal event
    assert events and events[-1].type != "response.completed"


def test_cancel_refuses_a_completed_or_foreground_response_and_another_callers(stored: LocalStack) -> None:
    alice, bob = client(stored), client(stored, "k-bob")
    background = alice.responses.create(model=MODEL, input="Hi", background=True)
    assert wait_until_done(alice, background.id) == "completed"
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a completed response"):
        alice.responses.cancel(background.id)
    foreground = alice.responses.create(model=MODEL, input="Hi")
    with pytest.raises(openai.BadRequestError, match="background=true"):
        alice.responses.cancel(foreground.id)
    for call in (
        lambda: bob.responses.cancel(background.id),
        lambda: bob.responses.retrieve(background.id, stream=True),
        lambda: alice.responses.cancel("resp_never_was"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()


def test_background_without_a_store_is_refused_by_name(stack_for: GetStack) -> None:
    stateless = stack_for()
    sdk = openai.OpenAI(base_url=loopback(stateless) + "/v1", api_key="unused", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model=MODEL, input="Hi", background=True)
    assert info.value.body["param"] == "background"  # type: ignore[index]


def test_background_with_store_false_is_refused_by_name(stored: LocalStack) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(stored).responses.create(model=MODEL, input="Hi", background=True, store=False)
    assert info.value.body["param"] == "background"  # type: ignore[index]


def test_an_agents_sdk_run_in_background_mode_completes(stored: LocalStack) -> None:
    import agents

    async def run() -> tuple[str, list[str]]:
        agents.set_tracing_disabled(True)  # never call OpenAI's tracing host
        sdk = openai.AsyncOpenAI(base_url=loopback(stored) + "/v1", api_key="k-alice", max_retries=0)
        model = agents.OpenAIResponsesModel(model=MODEL, openai_client=sdk)
        settings = agents.ModelSettings(extra_args={"background": True})
        agent = agents.Agent(name="bg", instructions="Be brief.", model=model, model_settings=settings)
        result = agents.Runner.run_streamed(agent, "Hello")
        kinds = [event.type async for event in result.stream_events()]
        return str(result.final_output), kinds + [r.response_id or "" for r in result.raw_responses]

    final, seen = asyncio.run(run())
    assert final and "raw_response_event" in seen
    ids = [s for s in seen if s.startswith("resp_")]
    assert len(ids) == 1
    assert client(stored).responses.retrieve(ids[0]).background is True
