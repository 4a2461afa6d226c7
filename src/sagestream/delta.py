"""What the relay carries from a decoder to an encoder: one :class:`Delta` per step of the answer.

Every container dialect decodes into these (:mod:`sagestream.dialects`) and every client protocol encodes
from them (:mod:`sagestream.protocols`): the one seam between the two, so neither side imports the other.

Example::

    >>> delta = Delta("Hé")
    >>> delta, is_text_only(delta), delta.is_empty
    (Delta(content='Hé'), True, False)
    >>> is_text_only(Delta("x", finish_reason="stop")), is_text_only(Delta("x", extra={"stop_reason": 7}))
    (False, False)
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Delta", "Usage", "is_text_only"]


class Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an answer cost, as the container counted it; a count it did not give is ``None``, never 0."""

    prompt_tokens: int | None
    completion_tokens: int
    total_tokens: int | None
    # The container's other usage fields as sent: completion_tokens_details (reasoning_tokens),
    # prompt_tokens_details (cached_tokens), ...
    details: dict[str, Any] = msgspec.field(default_factory=dict)

    def __repr__(self) -> str:
        more = f", details={self.details!r}" if self.details else ""
        return (
            f"Usage(prompt_tokens={self.prompt_tokens}, completion_tokens={self.completion_tokens}, "
            f"total_tokens={self.total_tokens}{more})"
        )


# Not frozen: a frozen dataclass sets each of its ten fields through object.__setattr__, which made building
# a Delta (once per token) cost about 19k instructions against 4k. Nothing changes a Delta once it is made.
class Delta(msgspec.Struct, forbid_unknown_fields=True):
    """One step of the answer, each field as the container sent it.

    ``content`` is text to append; ``tool_calls`` the OpenAI ``delta.tool_calls`` fragments (index, id,
    type, function name, argument pieces) untouched; ``reasoning_content`` / ``reasoning`` a reasoning
    model's thoughts under the name its server uses; ``logprobs`` the choice's logprobs object;
    ``extra`` any other delta field the container sent. On the last steps, why it ended and what it cost.
    """

    content: str = ""
    role: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    logprobs: dict[str, Any] | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    # The container's system_fingerprint (vLLM's build), on the first delta that saw one: a field of the answer,
    # not of the delta, which the OpenAI protocols' answers carry.
    system_fingerprint: str | None = None

    def __repr__(self) -> str:
        # Only what the delta carries: most deltas are one field.
        shown = [f"content={self.content!r}"]
        for name in (
            "role",
            "finish_reason",
            "usage",
            "tool_calls",
            "reasoning_content",
            "reasoning",
            "refusal",
            "logprobs",
            "system_fingerprint",
        ):
            value = getattr(self, name)
            if value is not None:
                shown.append(f"{name}={value!r}")
        if self.extra:
            shown.append(f"extra={self.extra!r}")
        return f"Delta({', '.join(shown)})"

    @property
    def is_empty(self) -> bool:
        """Nothing for the client: no text, no fragment, no end."""
        return not (
            self.content
            or self.role
            or self.finish_reason
            or self.usage
            or self.tool_calls
            or self.reasoning_content
            or self.reasoning
            or self.refusal
            or self.logprobs
            or self.extra
            or self.system_fingerprint
        )


def is_text_only(delta: Delta) -> bool:
    """Whether ``delta`` is text and nothing else an encoder must look at (usage aside): the deltas of the
    encoders' fast paths, which write such a delta from a template instead of building its event. One
    predicate for every encoder, so that no fast path skips a field another one writes.
    """
    return bool(
        delta.content
        and delta.finish_reason is None
        and delta.tool_calls is None
        and delta.reasoning_content is None
        and delta.reasoning is None
        and delta.refusal is None
        and delta.logprobs is None
        and not delta.extra
        and delta.system_fingerprint is None
    )
