"""The ``lmi`` dialect: LMI (DJL Serving) rolling-batch jsonlines, TGI's event shape under other names.

What differs from :mod:`~sagestream.dialects.tgi`: the stop list is ``stop_sequences``; ``presence_penalty``
is a parameter; each token carries its own logprob only, and only in a stream (no ``top_logprobs``, no
logprobs on a whole answer); no guided decoding. LMI alone reports a failed generation as
``finish_reason: "error"`` (the shared decoder reads it).

Example::

    >>> lmi = LMIDialect()
    >>> lmi.stop_name, "response_format" in lmi.refused, "presence_penalty" in lmi.refused
    ('stop_sequences', True, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sagestream.dialects.generate import NOT_CARRIED, LogprobsWanted
from sagestream.dialects.tgi import TGIDialect

if TYPE_CHECKING:
    from sagestream.dialects._base import AnyRequest

__all__ = ["LMIDialect"]

_TOP_LOGPROBS = NOT_CARRIED + " (LMI's stream carries each token's own logprob only)"


class LMIDialect(TGIDialect):
    name = "lmi"
    refused = {
        **{k: v for k, v in TGIDialect.refused.items() if k != "presence_penalty"},
        "top_logprobs": _TOP_LOGPROBS,
        "response_format": NOT_CARRIED + " (no guided decoding parameter in LMI's rolling-batch request)",
    }
    stop_name = "stop_sequences"
    computed_fields = frozenset(
        {
            "details",
            "max_new_tokens",
            "do_sample",
            "temperature",
            "top_p",
            "stop_sequences",
            "seed",
            "frequency_penalty",
            "presence_penalty",
        }
    )

    def logprobs_parameters(self, request: AnyRequest, stream: bool, parameters: dict[str, Any]) -> None:
        wanted = LogprobsWanted.of(request)
        if wanted is None:
            return
        if not stream:
            self.refuse("logprobs", "LMI sends each token's logprob only in its stream; ask with stream=true")
        if wanted.top:
            self.refuse("top_logprobs" if wanted.kind == "chat" else "logprobs", _TOP_LOGPROBS)
