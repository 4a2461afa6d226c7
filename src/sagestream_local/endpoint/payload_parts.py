"""How SageMaker may cut a container's bytes into ``PayloadPart`` payloads: the scenario's ``split``.

``none``: one event per PayloadPart; ``midline``: each event cut in two (on a character boundary);
``utf8``: cut inside the first multi-byte character; ``bytes``: one byte per PayloadPart; ``coalesce``:
``Scenario.coalesce`` events in one. A :class:`Piece` keeps the model step it is due at and the tokens
whose first byte it carries, so a record can say when each token left.

Example::

    >>> from sagestream_local.endpoint.answers import ModelEvent
    >>> events = [ModelEvent("data: é\\n\\n".encode(), 0, 0, "é")]
    >>> [p.data for p in pieces(events, "utf8", 1)]
    [b'data: \\xc3', b'\\xa9\\n\\n']
    >>> [p.slot for p in pieces(events * 3, "coalesce", 2)]
    [0, 0]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sagestream_local.endpoint.answers import ModelEvent
from sagestream_local.endpoint.scenario import Split


@dataclass(frozen=True)
class Piece:
    """Bytes for one PayloadPart, the model step it is due at and the tokens whose first byte it carries."""

    data: bytes
    slot: int
    starts: tuple[ModelEvent, ...] = ()


def pieces(events: list[ModelEvent], split: Split, coalesce: int) -> list[Piece]:
    """Cut the container's events into PayloadPart payloads the way SageMaker may deliver them."""
    out: list[Piece] = []
    if split == "coalesce":
        for start in range(0, len(events), coalesce):
            group = events[start : start + coalesce]
            data = b"".join(e.data for e in group)
            out.append(Piece(data, group[-1].slot, tuple(e for e in group if e.token is not None)))
        return out
    for event in events:
        starts = (event,) if event.token is not None else ()
        data = event.data
        cuts: list[int] = []
        if split == "midline" and len(data) > 1:
            cut = len(data) // 2
            while cut > 1 and data[cut] & 0xC0 == 0x80:  # keep midline cuts on characters; utf8 is its own case
                cut -= 1
            cuts = [cut]
        elif split == "utf8":
            lead = next((i for i, b in enumerate(data) if b >= 0xC0), None)
            cuts = [lead + 1] if lead is not None else []
        elif split == "bytes":
            cuts = list(range(1, len(data)))
        bounds = [0, *cuts, len(data)]
        for n, (a, b) in enumerate(itertools.pairwise(bounds)):
            out.append(Piece(data[a:b], event.slot, starts if n == 0 else ()))
    return out
