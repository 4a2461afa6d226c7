"""Chat messages to prompt text, for containers that only take ``inputs`` (TGI generate, LMI).

A template is chosen once, at configuration time, from the ``PROMPT_TEMPLATE`` environment variable
(read by ``sagestream.config``, not here); :func:`template` raises on a name it does not know so that a
typo fails the deployment's first invocation, not a user's request. Every template ends with the
assistant turn opened, so the model's answer is the continuation.

The templates leave out the beginning-of-text token: TGI, vLLM and LMI tokenize ``inputs`` with the
model's special tokens added, and a second BOS degrades some models' answers.

Example::

    >>> render = template("chatml")
    >>> print(render([("system", "Be brief."), ("user", "Hi")]), end="")
    <|im_start|>system
    Be brief.<|im_end|>
    <|im_start|>user
    Hi<|im_end|>
    <|im_start|>assistant
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Message", "PromptTemplate", "names", "template"]

Message = tuple[str, str]
"""``(role, text)``: role is ``system``, ``user``, ``assistant`` or ``tool``."""

PromptTemplate = Callable[[Sequence[Message]], str]


def llama3(messages: Sequence[Message]) -> str:
    """Llama 3 / 3.1 / 3.2 / 3.3 instruct header format."""
    parts = []
    for role, text in messages:
        # Llama 3.1 names a tool's result "ipython"; Meta's template trims every message.
        header = "ipython" if role == "tool" else role
        parts.append(f"<|start_header_id|>{header}<|end_header_id|>\n\n{text.strip()}<|eot_id|>")
    parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def chatml(messages: Sequence[Message]) -> str:
    """ChatML, as Qwen, Yi, Hermes and many fine-tunes use it."""
    parts = [f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


_TEMPLATES: dict[str, PromptTemplate] = {"llama3": llama3, "chatml": chatml}


def names() -> list[str]:
    """The template names :func:`template` accepts."""
    return sorted(_TEMPLATES)


def template(name: str) -> PromptTemplate:
    """The template called ``name``; ``ValueError`` naming the known ones if there is none."""
    try:
        return _TEMPLATES[name.strip().lower()]
    except KeyError:
        raise ValueError(f"Unknown prompt template {name!r}; known templates: {', '.join(names())}.") from None
