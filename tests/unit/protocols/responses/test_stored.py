"""The Responses API's stored responses over a store: continuing a response, the input items' pages, and the
refusals (another caller's or an unknown id, a chain past its limit), with moto's DynamoDB on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.protocols._wire import new_id
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.store import owner_of


def response(response_id: str, text: str) -> dict[str, Any]:
    output = [
        {
            "id": "msg_" + response_id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }
    ]
    return {"id": response_id, "object": "response", "output": output}


def test_a_continuation_is_the_stored_input_its_output_then_the_new_input(cfg: Config) -> None:
    store = stored.store_for(cfg)
    assert store is not None
    first_input = [{"type": "message", "role": "user", "content": "Hi"}]
    first = new_id("resp_")  # the shape of the ids the function mints: no other is looked up
    store.put(first, owner_of("key:k"), response(first, "Hello"), first_input, depth=1)
    data, continues = stored.continued({"previous_response_id": first, "input": "Again"}, cfg, "key:k")
    assert "previous_response_id" not in data and continues.depth == 1
    assert [item.get("role") for item in data["input"]] == ["user", "assistant", "user"]
    assert data["input"][-1]["content"] == "Again"


def test_another_callers_or_an_unknown_id_is_a_404_and_a_long_chain_a_400(cfg: Config) -> None:
    store = stored.store_for(cfg)
    assert store is not None
    deep = new_id("resp_")
    store.put(deep, owner_of("key:k"), response(deep, "x"), [], depth=2)
    for owner, response_id, status in (
        ("key:other", deep, 404),
        ("key:k", new_id("resp_"), 404),
        ("key:k", "resp_none", 404),
        ("key:k", deep + "#state", 404),
        ("key:k", deep, 400),
    ):
        with pytest.raises(APIError) as caught:
            stored.continued({"previous_response_id": response_id, "input": "x"}, cfg, owner)
        assert (caught.value.status, caught.value.param) == (status, "previous_response_id")


def test_input_items_are_paged_as_openai_lists_them() -> None:
    items = stored.with_item_ids([{"type": "message", "role": "user", "content": str(n)} for n in range(5)])
    assert len({item["id"] for item in items}) == 5
    first = stored.input_items_page(items, {"limit": "2"})
    assert [i["content"] for i in first["data"]] == ["4", "3"] and first["has_more"]
    rest = stored.input_items_page(items, {"after": first["last_id"], "limit": "10"})
    assert [i["content"] for i in rest["data"]] == ["2", "1", "0"] and not rest["has_more"]
    for bad, param in (({"limit": "0"}, "limit"), ({"order": "up"}, "order"), ({"after": "nope"}, "after")):
        with pytest.raises(APIError) as caught:
            stored.input_items_page(items, bad)
        assert caught.value.param == param


def test_no_store_configured_means_none() -> None:
    assert stored.store_for(Config(endpoint_name="e")) is None
