"""The client protocols: one package each, with the same roles in each.

``openai/`` (chat completions, completions), ``anthropic/`` (Messages), ``responses/`` (the Responses API):
each has ``request.py`` (a body read strictly into its request models, which are in ``models.py`` where they
are many, and translated into the chat-shaped request the dialects speak), ``encoder.py`` (its streamed events
and whole answers, from the relay's deltas) and, in its ``__init__``, its :class:`ClientAPI` object and routes.
What they share is beside them: :mod:`._api` (the interface), :mod:`._wire` (JSON, SSE events, padding, ids),
:mod:`._requests` (strict reading, limits, the 400 that names a field).

A new client protocol is one package here and one line each in :data:`APIS` and :data:`ROUTES`; the app
serves every route in :data:`ROUTES` and knows no protocol by name.

Example::

    >>> [api.kind for api in APIS]
    ['chat', 'completion', 'messages', 'response']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sagestream.http import Route
from sagestream.protocols import anthropic, openai, responses
from sagestream.protocols._api import ClientAPI, Completion, Parsed, StreamEncoder, in_client_terms
from sagestream.protocols._wire import error_event
from sagestream.protocols.anthropic import MESSAGES
from sagestream.protocols.openai import CHAT, COMPLETIONS
from sagestream.protocols.responses import RESPONSES

__all__ = [
    "APIS",
    "CHAT",
    "COMPLETIONS",
    "MESSAGES",
    "RESPONSES",
    "ROUTES",
    "ClientAPI",
    "Completion",
    "Parsed",
    "StreamEncoder",
    "at_init",
    "error_event",
    "in_client_terms",
    "internal_handler",
]

# Every client protocol the function speaks, and the routes each registers.
APIS: tuple[ClientAPI, ...] = (CHAT, COMPLETIONS, MESSAGES, RESPONSES)
ROUTES: tuple[Route[ClientAPI], ...] = (*openai.ROUTES, *anthropic.ROUTES, *responses.ROUTES)
# The function's own events (it invokes itself asynchronously: a background response's run), by their
# "sagestream" key; handler(app, event, call), under the app's one invocation frame.
INTERNAL_EVENTS: dict[str, Callable[[Any, Any, Any], None]] = {**responses.INTERNAL_EVENTS}


def at_init(config: Any) -> None:
    """What the protocols make once, at init, besides the upstream's client (a store's clients)."""
    responses.at_init(config)


def internal_handler(event: Mapping[str, Any]) -> Callable[[Any, Any, Any], None] | None:
    """The handler of one of the function's own events; None for every other (an HTTP front's event always has
    a ``requestContext``, so no HTTP caller can send one).

    >>> internal_handler({"sagestream": "responses.background"}) is not None
    True
    >>> internal_handler({"sagestream": "responses.background", "requestContext": {}}) is None
    True
    """
    if "requestContext" in event or "httpMethod" in event:
        return None
    kind = event.get("sagestream")
    return INTERNAL_EVENTS.get(kind) if isinstance(kind, str) else None
