"""The routes of one stored response: its paths are the route table's (a parameter, not a router of its own), an
id of a shape the function never mints is a 404 before any read, and without a store every id route is a 404
saying why; over moto's DynamoDB on loopback, a stored response is read, listed and deleted for its owner only."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.http import Request, Routes
from sagestream.protocols._wire import new_id
from sagestream.protocols.responses import ROUTES, by_id, stored
from sagestream.protocols.responses.store import owner_of
from tests.fakes import call_of


class App:
    def __init__(self, config: Config, caller: str = "key:alice") -> None:
        self.config, self.caller = config, caller

    def owner(self, call: Any) -> str:
        return self.caller

    def deadline(self, call: Any) -> float:
        return time.monotonic() + 30

    def settle_quota(self, record: Any, job: Any) -> None:
        pass


def call(method: str, path: str, **query: str) -> Any:
    asked = call_of(Request(method=method, path=path, headers={}, body=b"", query=query))
    route, asked.params = Routes(ROUTES).resolve(path)
    assert route is not None and method in route.methods, (method, path)
    return asked, route


def test_each_id_path_is_a_route_with_its_parameter_and_others_are_none() -> None:
    routes = Routes(ROUTES)
    rid = new_id("resp_")
    for path, methods in (
        (f"/v1/responses/{rid}", ("GET", "DELETE", "HEAD")),
        (f"/v1/responses/{rid}/input_items", ("GET", "HEAD")),
        (f"/v1/responses/{rid}/cancel", ("POST",)),
    ):
        route, params = routes.resolve(path)
        assert route is not None and set(route.methods) == set(methods) and params == {"response_id": rid}
    assert routes.resolve(f"/v1/responses/{rid}/input_items/more") == (None, {})


def test_without_a_store_every_id_route_is_a_404_that_says_why() -> None:
    app = App(Config(endpoint_name="e"))
    for method, path in (("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")):
        asked, route = call(method, path)
        with pytest.raises(APIError) as refused:
            route.handler(app, asked)
        assert refused.value.status == 404 and "keeps no responses" in refused.value.message


@pytest.mark.parametrize("bad", ["resp_1", "x" * 3000, "resp_" + "0" * 32 + "#state"])
def test_an_id_the_function_never_mints_is_a_404_before_any_read(bad: str) -> None:
    app = App(Config(endpoint_name="e", responses_store="dynamodb", responses_table="no-such-table"))
    for reach in (by_id.one, by_id.items, by_id.cancel):
        asked = call_of(Request(method="GET", path="/v1/responses/x", headers={}, body=b""))
        with pytest.raises(APIError) as refused:
            reach(app, asked, bad)
        assert refused.value.status == 404 and refused.value.code == "not_found"


def test_a_stored_response_is_read_listed_and_deleted_by_its_owner_only(cfg: Config) -> None:
    rid = new_id("resp_")
    store = stored.store_for(cfg)
    assert store is not None
    items = [{"id": "msg_1", "type": "message", "role": "user", "content": "Hi"}]
    store.put(rid, owner_of("key:alice"), {"id": rid, "object": "response", "status": "completed"}, items, 1)
    alice, bob = App(cfg), App(cfg, "key:bob")
    asked, route = call("GET", f"/v1/responses/{rid}")
    route.handler(alice, asked)
    assert json.loads(asked.writer.stream.body)["id"] == rid
    listed, route = call("GET", f"/v1/responses/{rid}/input_items")
    route.handler(alice, listed)
    assert [item["id"] for item in json.loads(listed.writer.stream.body)["data"]] == ["msg_1"]
    for method in ("GET", "DELETE"):
        other, route = call(method, f"/v1/responses/{rid}")
        with pytest.raises(APIError) as refused:
            route.handler(bob, other)
        assert refused.value.status == 404
    gone, route = call("DELETE", f"/v1/responses/{rid}")
    route.handler(alice, gone)
    assert json.loads(gone.writer.stream.body) == {"id": rid, "object": "response.deleted", "deleted": True}
    assert store.get(rid, owner_of("key:alice")) is None
