"""The Responses API's stored responses (``RESPONSES_STORE=dynamodb``): ``previous_response_id``, and the reads
behind ``GET`` / ``DELETE /v1/responses/{id}`` and its ``input_items`` over
:mod:`sagestream.protocols.responses.store`.

A request that continues a stored response is the stored response's whole input, then its output items, then the
new input, as the model saw them (``instructions`` are not carried over, as OpenAI documents): one read,
however long the chain. After the answer has been written whole (``response.completed`` or
``response.incomplete`` sent), the response is stored with that input, when the request did not say ``store:
false``; a failed write is logged and counted, never delayed onto a token. Every read and delete is the
caller's own: a response of another caller is a 404, exactly as one that does not exist.

A deployment without a store never imports this module; with one, a request without ``previous_response_id``
reads nothing from the store on its way to the first token (its answer is written after the last byte).

Environment variables read: none (``RESPONSES_*`` through :mod:`sagestream.config`).

Example::

    >>> this_input("Hi")
    [{'type': 'message', 'role': 'user', 'content': 'Hi'}]
    >>> page = input_items_page([{"id": "a"}, {"id": "b"}, {"id": "c"}], {"limit": "2"})
    >>> [item["id"] for item in page["data"]], page["has_more"]
    (['c', 'b'], True)
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sagestream.errors import APIError
from sagestream.protocols.responses.runs import ACTIVE, Runs
from sagestream.protocols.responses.store import DynamoStore, Stored, StoreError, owner_of, valid_response_id

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = [
    "continued",
    "input_items_page",
    "not_found",
    "runs_for",
    "save",
    "store_for",
    "this_input",
    "unavailable",
    "with_item_ids",
]

logger = logging.getLogger(__name__)

# One store per table, made at init (sagestream.protocols.responses.at_init) and kept across invocations.
_STORES: dict[str, DynamoStore] = {}
_RUNS: dict[str, Runs] = {}


def store_for(cfg: Config) -> DynamoStore | None:
    """The store of ``cfg``'s deployment, or None when it keeps no responses."""
    if cfg.responses_store != "dynamodb" or not cfg.responses_table:
        return None
    store = _STORES.get(cfg.responses_table)
    if store is None:
        store = _STORES[cfg.responses_table] = DynamoStore(cfg.responses_table, cfg.responses_ttl_days * 86_400)
    return store


def runs_for(cfg: Config) -> Runs:
    """The runs (state, job, events) on ``cfg``'s store; :class:`StoreError` without one."""
    store = store_for(cfg)
    if store is None:
        raise StoreError("no store is configured")
    runs = _RUNS.get(store.table)
    if runs is None:
        runs = _RUNS[store.table] = Runs(store)
    return runs


def not_found(response_id: str, param: str | None = None) -> APIError:
    return APIError.not_found(f"No response with id '{response_id}' was found.", code="not_found", param=param)


def unavailable(exc: StoreError) -> APIError:
    logger.error("the responses store failed: %s", exc)
    return APIError(503, "The stored responses could not be read. Try again.", type="server_error", code="store_error")


def continued(data: dict[str, Any], cfg: Config, owner: str) -> tuple[dict[str, Any], Stored]:
    """``data`` (a Responses body naming ``previous_response_id``) with its input after the stored conversation,
    and the stored response it continues; 404 if the caller has no such response, 400 past the chain limit."""
    store = store_for(cfg)
    previous = data.get("previous_response_id")
    if store is None or not isinstance(previous, str):
        return data, Stored({}, [], 0)  # the parser refuses it by name (no store), or by type
    if not valid_response_id(previous):  # no id this function mints: nobody's response, nor a run's inner item
        raise not_found(previous, "previous_response_id")
    try:
        stored = _read_settled(store, cfg, previous, owner_of(owner))
    except StoreError as exc:
        raise unavailable(exc) from exc
    if stored is None:
        raise not_found(previous, "previous_response_id")
    if stored.depth >= cfg.responses_max_chain:
        raise APIError.invalid_request(
            f"'previous_response_id' continues a chain of {stored.depth} responses; this endpoint keeps chains of at "
            f"most {cfg.responses_max_chain} (RESPONSES_MAX_CHAIN): send the conversation in 'input' instead.",
            param="previous_response_id",
        )
    history = [*stored.input_items, *stored.response.get("output", [])]
    rest = {k: v for k, v in data.items() if k != "previous_response_id"}
    return {**rest, "input": [*history, *this_input(data.get("input"))]}, stored


# How long a continuation waits for the response it names to be stored, when that response's stream has ended
# for its client but its invocation is still storing it (which happens after the answer's last byte).
SETTLE_WAIT_S = 3.0
SETTLE_POLL_S = 0.05


def _read_settled(store: DynamoStore, cfg: Config, response_id: str, owner: str) -> Stored | None:
    """The stored response; when it is not there yet but its run is still active (its answer written, its store
    write not done), read again until it is, for at most :data:`SETTLE_WAIT_S`."""
    found = store.get(response_id, owner)
    if found is not None or not cfg.responses_resumable_streams:
        return found
    ends = time.monotonic() + SETTLE_WAIT_S
    while time.monotonic() < ends:
        state = runs_for(cfg).state(response_id, owner)
        if state is None or state.status not in ACTIVE or state.background:
            return store.get(response_id, owner)  # ended meanwhile (its store write came first), or none
        time.sleep(SETTLE_POLL_S)
        found = store.get(response_id, owner)
        if found is not None:
            return found
    return None


def this_input(value: Any) -> list[Any]:
    """A request's ``input`` as items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def with_item_ids(items: list[Any]) -> list[Any]:
    """The items with an ``id`` each (``input_items`` lists them by id; a client's items may have none)."""
    return [
        {**item, "id": item.get("id") or "msg_" + uuid.uuid4().hex} if isinstance(item, dict) else item
        for item in items
    ]


def input_items_page(items: list[Any], query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: OpenAI's list object, ``order`` (``desc`` by default), ``after``
    (an item id) and ``limit`` (1-100, 20 by default); a 400 naming a bad one."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError.invalid_request("'order' must be 'asc' or 'desc'.", param="order")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise APIError.invalid_request("'limit' must be a whole number from 1 to 100.", param="limit")
    ordered = list(reversed(items)) if order == "desc" else list(items)
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise APIError.invalid_request(f"No input item with id '{after}' was found.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > limit,
    }


def save(cfg: Config, owner: str, response_json: bytes, *, request_body: bytes, depth: int) -> None:
    """Store a response the client has received whole, with the input of ``request_body`` (the conversation it
    continued included); :class:`StoreError` when it could not be. Run after the answer's last byte: the body is
    read again here, not on the way to the first token."""
    store = store_for(cfg)
    if store is None:
        raise StoreError("no store is configured")
    try:
        response = json.loads(response_json)
        response_id = str(response["id"])
        items = with_item_ids(this_input(json.loads(request_body).get("input")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"the answer or its request is not what was expected: {exc}") from exc
    store.put(response_id, owner_of(owner), response, items, depth)
