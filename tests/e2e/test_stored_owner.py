"""A stored response belongs to the API key that authenticated its request, whichever header carried it and whatever
else the request presented: the key that passed the check, as the quotas count it, not the set of keys sent."""

from __future__ import annotations

import json
import time

from sagestream_local.stack import LocalStack
from tests.client import request
from tests.e2e.conftest import GetStack


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def create(stack: LocalStack, headers: dict[str, str], timeout_s: float = 10.0) -> str:
    """A stored response made with ``headers``; returned once those headers read it (the store's write may
    follow the answer's last byte)."""
    made = request(stack.url, "POST", "/v1/responses", {"input": "Hello", "max_output_tokens": 4}, headers=headers)
    assert made.status == 200, made.body
    response_id = str(json.loads(made.body)["id"])
    ends = time.monotonic() + timeout_s
    while request(stack.url, "GET", f"/v1/responses/{response_id}", headers=headers).status != 200:
        assert time.monotonic() < ends, f"{response_id} was never stored"
        time.sleep(0.05)
    return response_id


def test_one_key_in_both_headers_owns_its_response_as_either_header_alone_does(stack_for: GetStack) -> None:
    stack = stack_for(RESPONSES_STORE="dynamodb", API_KEYS="k-alice,k-bob")
    both = create(stack, {**bearer("k-alice"), "x-api-key": "k-alice"})
    for headers in (bearer("k-alice"), {"x-api-key": "k-alice"}, {**bearer("k-alice"), "x-api-key": "k-alice"}):
        got = request(stack.url, "GET", f"/v1/responses/{both}", headers=headers)
        assert got.status == 200 and json.loads(got.body)["id"] == both, headers
    assert request(stack.url, "GET", f"/v1/responses/{both}", headers=bearer("k-bob")).status == 404


def test_a_key_that_did_not_authenticate_changes_nothing_of_who_owns(stack_for: GetStack) -> None:
    stack = stack_for(RESPONSES_STORE="dynamodb", API_KEYS="k-alice,k-bob")
    # Bearer k-alice passes the check; the x-api-key beside it is no key at all, and owns nothing.
    made = create(stack, {**bearer("k-alice"), "x-api-key": "not-a-key"})
    assert request(stack.url, "GET", f"/v1/responses/{made}", headers=bearer("k-alice")).status == 200
    items = request(stack.url, "GET", f"/v1/responses/{made}/input_items", headers={"x-api-key": "k-alice"})
    assert items.status == 200
    # And what k-alice made alone, she reads sending a second, wrong, key beside hers.
    alone = create(stack, bearer("k-alice"))
    mixed = request(stack.url, "GET", f"/v1/responses/{alone}", headers={**bearer("k-alice"), "x-api-key": "nope"})
    assert mixed.status == 200
