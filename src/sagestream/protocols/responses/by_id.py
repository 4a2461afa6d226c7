"""The routes of one stored response, by its id, for its caller: ``GET`` / ``DELETE /v1/responses/{response_id}``,
``GET /v1/responses/{response_id}/input_items`` and ``POST /v1/responses/{response_id}/cancel`` (their paths,
methods, 404s and 405s are the app's route table's, :class:`sagestream.http.Routes`). Another caller's id is a
404 as an unknown one is, and so is an id of a shape this function never mints. A response still running (or
cancelled, or failed) is shown by its run's state; ``?stream=true`` replays and follows its events.

Environment variables read: none.

Example::

    >>> from sagestream.protocols.responses.store import valid_response_id
    >>> valid_response_id("resp_" + "0" * 32), valid_response_id("resp_" + "0" * 32 + "#state")
    (True, False)
"""

from __future__ import annotations

from typing import Any

from sagestream.protocols.responses import cancelling, replay, stored
from sagestream.protocols.responses.store import StoreError, owner_of, valid_response_id

__all__ = ["cancel", "items", "one"]


def _checked(response_id: str) -> str:
    if not valid_response_id(response_id):  # no id this function mints: nobody's response, nor a run's inner item
        raise stored.not_found(response_id)
    return response_id


def one(app: Any, call: Any, response_id: str) -> None:
    """``GET`` (a stored response, or a running one's state; ``?stream=true``: its events) or ``DELETE`` (the
    response, and its run's items with it: a running background run stops)."""
    config, caller = app.config, app.owner(call)
    response_id = _checked(response_id)
    if call.request.method != "DELETE" and call.request.query.get("stream") == "true":
        replay.replay(call, config, caller, response_id, app.deadline(call))
        return
    store, owner = stored.store_for(config), owner_of(caller)
    assert store is not None
    runs = stored.runs_for(config)
    try:
        if call.request.method == "DELETE":
            cancelling.dequeue(app, runs, response_id, owner)  # a queued one never runs
            deleted = store.delete(response_id, owner)
            if config.responses_resumable_streams or not deleted:  # its run's items too: its events hold its text
                deleted = runs.delete(response_id, owner) or deleted
            if not deleted:
                raise stored.not_found(response_id)
            call.writer.json({"id": response_id, "object": "response.deleted", "deleted": True})
            return
        found = store.get(response_id, owner)
        if found is None:
            running = cancelling.status(app, config, caller, response_id)
            if running is not None:
                call.writer.json(running)
                return
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if found is None:
        raise stored.not_found(response_id)
    call.writer.json(found.response)


def items(app: Any, call: Any, response_id: str) -> None:
    """The input items of the caller's stored response, a page at a time."""
    response_id = _checked(response_id)
    store = stored.store_for(app.config)
    assert store is not None
    try:
        found = store.get(response_id, owner_of(app.owner(call)))
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if found is None:
        raise stored.not_found(response_id)
    call.writer.json(stored.input_items_page(found.input_items, call.request.query))


def cancel(app: Any, call: Any, response_id: str) -> None:
    """Stop the caller's background response (:func:`sagestream.protocols.responses.cancelling.cancel`)."""
    cancelling.cancel(app, call, app.config, app.owner(call), _checked(response_id))
