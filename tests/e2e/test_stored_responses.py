"""Stored responses through the whole local chain, with moto's DynamoDB server on loopback as the store (what
``make run`` starts): the openai SDK continues a response by ``previous_response_id`` (the endpoint is sent the
whole conversation), fetches it, lists its input items page by page and deletes it; another API key's caller
finds none of it, exactly as for an id that never existed; ``store: false`` keeps nothing."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.e2e.conftest import GetStack
from tests.e2e.test_anthropic_clients import loopback

MODEL = SIM_ENDPOINT_NAME


@pytest.fixture
def stored(stack_for: GetStack) -> LocalStack:
    return stack_for(RESPONSES_STORE="dynamodb", API_KEYS="k-alice,k-bob")


def client(stack: LocalStack, key: str = "k-alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=loopback(stack) + "/v1", api_key=key, max_retries=0, timeout=30)


def sent_messages(stack: LocalStack) -> list[Any]:
    assert stack.endpoint is not None
    return list(json.loads(stack.endpoint.records[-1].body)["messages"])


def test_a_response_is_continued_by_its_id_with_the_whole_conversation_sent(stored: LocalStack) -> None:
    sdk = client(stored)
    first = sdk.responses.create(model=MODEL, input="My name is Ada.", instructions="Be brief.")
    assert first.store is True and first.output_text
    with sdk.responses.stream(model=MODEL, input="What is my name?", previous_response_id=first.id) as stream:
        second = stream.get_final_response()
    assert second.previous_response_id == first.id and second.output_text
    messages = sent_messages(stored)
    # instructions are not carried over; the first turn, its answer and the new turn are.
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "My name is Ada."),
        ("assistant", first.output_text),
        ("user", "What is my name?"),
    ]
    third = sdk.responses.create(model=MODEL, input="And again?", previous_response_id=second.id)
    assert len(sent_messages(stored)) == 5 and third.previous_response_id == second.id


def test_get_input_items_and_delete_are_the_callers_own(stored: LocalStack) -> None:
    alice, bob = client(stored), client(stored, "k-bob")
    first = alice.responses.create(model=MODEL, input="One")
    second = alice.responses.create(model=MODEL, input="Two", previous_response_id=first.id)
    assert alice.responses.retrieve(second.id).output_text == second.output_text
    page = alice.responses.input_items.list(second.id, limit=2, order="asc")
    assert [item.type for item in page.data] == ["message", "message"] and page.has_more
    rest = alice.responses.input_items.list(second.id, after=page.data[-1].id, order="asc")
    assert len(rest.data) == 1 and not rest.has_more
    for call in (
        lambda: bob.responses.retrieve(second.id),
        lambda: bob.responses.delete(second.id),
        lambda: bob.responses.create(model=MODEL, input="x", previous_response_id=second.id),
        lambda: alice.responses.retrieve("resp_never_was"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    alice.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(second.id)


def test_store_false_keeps_nothing(stored: LocalStack) -> None:
    sdk = client(stored)
    answer = sdk.responses.create(model=MODEL, input="Hi", store=False)
    assert answer.store is False
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(answer.id)


def test_without_a_store_previous_response_id_is_refused_by_name(stack_for: GetStack) -> None:
    stateless = stack_for()
    with pytest.raises(openai.BadRequestError) as caught:
        client(stateless).responses.create(model=MODEL, input="x", previous_response_id="resp_1")
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert client(stateless).responses.create(model=MODEL, input="x").store is False
