"""Stopping a background response: ``POST /v1/responses/{response_id}/cancel`` (its run sees the cancel within
about half a second, on its event log's thread, and closes its upstream stream); taking a queued one out of the
queue (a cancel, a delete: its quota reservation given back, once); and a running response's state for
``GET /v1/responses/{response_id}``.

Environment variables read: none.

Example::

    >>> cancel.__name__, dequeue.__name__
    ('cancel', 'dequeue')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sagestream.errors import APIError
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.runs import Runs
from sagestream.protocols.responses.store import StoreError, owner_of
from sagestream.protocols.responses.stored import runs_for

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["cancel", "dequeue", "status"]


def cancel(app: Any, call: Any, cfg: Config, caller: str, response_id: str) -> None:
    """Cancel a background response (idempotent: a cancelled one is answered again as it is); a 400 for one
    that was not made in the background or has ended, as OpenAI answers them."""
    runs, owner = runs_for(cfg), owner_of(caller)
    try:
        dequeue(app, runs, response_id, owner)  # one still queued never runs: its quota is given back here
        state = runs.cancel(response_id, owner)
        kept = state is None and stored.store_for(cfg).get(response_id, owner) is not None  # type: ignore[union-attr]
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if state is None and not kept:
        raise stored.not_found(response_id)
    if state is None or not state.background:
        raise APIError.invalid_request("Only responses created with background=true can be cancelled.")
    if state.status != "cancelled":
        raise APIError.invalid_request(f"Cannot cancel a {state.status} response.")
    call.writer.json(state.response)


def dequeue(app: Any, runs: Runs, response_id: str, owner: str) -> None:
    """Take ``owner``'s background response out of the queue if it is still there (a cancel, a delete): the run
    will never claim it, so the caller's quota reservation is given back here, once (the request still counts)."""
    if not runs.dequeue(response_id, owner):
        return
    found = runs.job(response_id)
    if found is not None:
        app.settle_quota(None, found[1].get("quota"))


def status(app: Any, cfg: Config, caller: str, response_id: str) -> dict[str, Any] | None:
    """A running (or cancelled, or failed) response's object, for ``GET /v1/responses/{id}``; None if none. A
    background response whose run never started (Lambda dropped its event) reads as failed, and the first read
    that finds it so gives its caller's quota reservation back."""
    runs = runs_for(cfg)
    state = runs.state(response_id, owner_of(caller))
    if state is None:
        return None
    if state.background and state.status == "failed" and runs.give_up(response_id, state.response):
        found = runs.job(response_id)
        if found is not None:
            app.settle_quota(None, found[1].get("quota"))
    return state.response
