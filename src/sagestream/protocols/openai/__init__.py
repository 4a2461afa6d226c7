"""OpenAI's chat completions and completions: ``/v1/chat/completions`` and ``/v1/completions``.

The request models are :mod:`~sagestream.protocols.openai.request`'s (the chat request is also the
chat-shaped request every protocol translates into), the streamed answer
:mod:`~sagestream.protocols.openai.encoder`'s ``chat.completion.chunk`` events.

Example::

    >>> CHAT.kind, COMPLETIONS.kind
    ('chat', 'completion')
    >>> CHAT.error_body(APIError.invalid_request("bad", param="messages"))[:31]
    b'{"error":{"message":"bad","type'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.protocols._api import Parsed, StreamEncoder, completion_route
from sagestream.protocols.openai.encoder import ChunkEncoder, Kind, completion_json

# The request models load at init: the first request after a cold start is a completion and needs them;
# deferring them moved ~100 ms onto that request's first token (and off provisioned concurrency's init).
from sagestream.protocols.openai.request import parse_chat, parse_completion

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["CHAT", "COMPLETIONS", "ROUTES", "OpenAICompletions"]


class OpenAICompletions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """OpenAI's ``/v1/chat/completions`` (``kind="chat"``) or ``/v1/completions`` (``kind="completion"``)."""

    kind: Kind

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, ...]:
        return ()  # OpenAI's headers (organization, project, beta) ask nothing of the relay

    def parse(self, raw: bytes, cfg: Config, caller: str = "") -> Parsed:
        parse = parse_chat if self.kind == "chat" else parse_completion
        request = parse(
            raw,
            max_tokens_limit=cfg.max_tokens_limit,
            extra_fields=cfg.extra_request_fields,
            max_prompt_chars=cfg.max_prompt_chars,
        )
        return Parsed(request, request)

    def encoder(self, parsed: Parsed, cfg: Config) -> StreamEncoder:
        return ChunkEncoder(
            model=cfg.model_id, kind=self.kind, include_usage=parsed.request.include_usage, pad_bytes=cfg.sse_pad_bytes
        )

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return completion_json(answer, model=cfg.model_id, kind=self.kind)

    def error_body(self, err: APIError) -> bytes:
        return err.json_bytes()

    @property
    def id_headers(self) -> tuple[str, ...]:
        return ("x-request-id",)


CHAT = OpenAICompletions("chat")


COMPLETIONS = OpenAICompletions("completion")

ROUTES = (completion_route("/v1/chat/completions", CHAT), completion_route("/v1/completions", COMPLETIONS))
