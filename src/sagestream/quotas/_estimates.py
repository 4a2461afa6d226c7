"""What a request is reserved before its answer (:func:`estimate_tokens`, its prompt's tokens from the upstream body)
and charged after it (:func:`tokens_used`, the container's counts where it reported them).

Environment variables read: none.
"""

from __future__ import annotations

import math

__all__ = ["MEDIA_TOKENS", "estimate_tokens", "tokens_used"]

# What an inline image (or other medium) is estimated at: vision models take about 1-3 thousand tokens for one.
MEDIA_TOKENS = 1600


def estimate_tokens(payload: bytes) -> int:
    """The prompt's tokens, estimated from the upstream body: its bytes / 3, rounded up (a tokenizer averages
    about 4 characters a token in English, fewer in code and in other scripts), except that an image or other
    medium sent inline (a base64 ``data:`` URL) is :data:`MEDIA_TOKENS`, not its bytes; the settle corrects it.

    >>> estimate_tokens(b'{"text": "abcdef", "url": "data:image/png;base64,' + b"A" * 300_000 + b'"}')
    1610
    """
    size, media = len(payload), 0
    if b";base64," in payload:
        import re

        for found in re.finditer(rb"data:[\w.+/-]+;base64,[A-Za-z0-9+/=]+", payload):
            size -= len(found.group())
            media += 1
    return math.ceil(size / 3) + media * MEDIA_TOKENS


def tokens_used(prompt_reported: int | None, completion_reported: int | None, written: int, estimate: int) -> int:
    """What a request is charged: the container's counts where it reported them (each part, else the
    estimate of the prompt and the deltas written); nothing when nothing was generated or reported.

    >>> tokens_used(12, 30, 29, 50), tokens_used(None, None, 7, 50), tokens_used(None, None, 0, 50)
    (42, 57, 0)
    """
    if completion_reported is None and written == 0:
        return 0
    prompt = estimate if prompt_reported is None else prompt_reported
    return prompt + (written if completion_reported is None else completion_reported)
