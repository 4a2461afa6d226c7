"""Response ids are checked against the shape the function mints (``resp_`` and 32 hex digits) on every id route:
a run's inner items (``<id>#state``, ``#job``, ``#events``) and ids past DynamoDB's 2,048-byte key limit are
no response's, a 404 ``not_found`` (``previous_response_id``'s names its field), never a 500, a 503, or an
internal item read or deleted."""

from __future__ import annotations

import json
import time

import pytest

from sagestream_local.stack import LocalStack
from tests.client import request
from tests.e2e.conftest import GetStack

ALICE = {"Authorization": "Bearer k-alice"}


@pytest.fixture
def stored(stack_for: GetStack) -> LocalStack:
    return stack_for(concurrency=3, RESPONSES_STORE="dynamodb", API_KEYS="k-alice,k-bob")


def finished(stack: LocalStack, response_id: str, timeout_s: float = 20.0) -> dict[str, object]:
    """The background response once its run has ended."""
    ends = time.monotonic() + timeout_s
    while True:
        got = request(stack.url, "GET", f"/v1/responses/{response_id}", headers=ALICE)
        body = json.loads(got.body)
        if got.status == 200 and body["status"] not in ("queued", "in_progress"):
            return dict(body)
        assert time.monotonic() < ends, f"{response_id} still running: {got.status} {body}"
        time.sleep(0.05)


def test_no_id_but_a_minted_one_reaches_the_store_on_any_route(stored: LocalStack) -> None:
    made = request(stored.url, "POST", "/v1/responses", {"input": "Hi", "background": True}, headers=ALICE)
    assert made.status == 200, made.body
    own = json.loads(made.body)["id"]
    assert finished(stored, own)["status"] == "completed"
    odd = [own + "#state", own + "#job", own + "#events", "resp_" + "a" * 3000, own.upper(), own + "x"]
    for bad in odd:
        routes = [
            ("GET", f"/v1/responses/{bad}"),
            ("GET", f"/v1/responses/{bad}?stream=true&starting_after=0"),
            ("GET", f"/v1/responses/{bad}/input_items"),
            ("POST", f"/v1/responses/{bad}/cancel"),
            ("DELETE", f"/v1/responses/{bad}"),
        ]
        for method, path in routes:
            answer = request(stored.url, method, path.replace("#", "%23"), headers=ALICE)
            error = json.loads(answer.body)["error"]
            assert (answer.status, error["code"]) == (404, "not_found"), (method, bad[:60], answer.body[:200])
        continued = request(
            stored.url, "POST", "/v1/responses", {"input": "Again", "previous_response_id": bad}, headers=ALICE
        )
        error = json.loads(continued.body)["error"]
        assert continued.status == 404 and error["param"] == "previous_response_id", continued.body[:200]
    assert finished(stored, own)["status"] == "completed", "nothing of its run was deleted"
    again = request(stored.url, "POST", "/v1/responses", {"input": "Again", "previous_response_id": own}, headers=ALICE)
    assert again.status == 200
