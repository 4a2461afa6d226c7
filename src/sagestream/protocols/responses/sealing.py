"""A reasoning item's ``encrypted_content``: sealed when a client asks for it, read back when it returns.

Clients that keep nothing on the server (``store: false``: Codex CLI) ask for it to send the reasoning back on
the next turn. It is the reasoning text itself in base64 behind a prefix, not encrypted: the client was sent
the text in the clear anyway; it only has to come back here and be read.

Example::

    >>> unseal(seal("thought")), unseal("gAAAA-not-ours")
    ('thought', None)
"""

from __future__ import annotations

import base64

__all__ = ["SEALED_REASONING", "seal", "unseal"]


# A reasoning item's encrypted_content, when a client asks for it (store: false clients such as Codex do, to send
# reasoning back on the next turn): the reasoning text itself in base64 behind this prefix. Not encrypted (the
# client was sent the text in the clear anyway): it only has to come back here and be read.
SEALED_REASONING = "sagestream.reasoning.v1:"


def seal(text: str) -> str:
    return SEALED_REASONING + base64.b64encode(text.encode()).decode()


def unseal(sealed: str) -> str | None:
    if not sealed.startswith(SEALED_REASONING):
        return None
    try:
        return base64.b64decode(sealed[len(SEALED_REASONING) :], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
