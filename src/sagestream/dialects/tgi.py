"""The ``tgi`` dialect: text-generation-inference's ``generate`` / ``generate_stream``.

What TGI adds to the generate format: ``top_n_tokens`` (OpenAI's ``top_logprobs``) and ``grammar`` (guided
decoding to a JSON Schema, OpenAI's ``response_format``); it has no ``presence_penalty``.

Example::

    >>> from sagestream.errors import APIError
    >>> from sagestream.protocols.openai.request import parse_chat
    >>> chat = parse_chat(b'{"messages": [{"role": "user", "content": "Hi"}], "tools": []}', max_tokens_limit=None)
    >>> try:
    ...     TGIDialect().body(chat, prompt_template="chatml", stream=True, max_tokens_default=None)
    ... except APIError as err:
    ...     print(err.param)
    tools
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sagestream.dialects.generate import MESSAGES_API, NOT_CARRIED, GenerateDialect, LogprobsWanted

if TYPE_CHECKING:
    from sagestream.dialects._base import AnyRequest

__all__ = ["TGIDialect"]


class TGIDialect(GenerateDialect):
    name = "tgi"
    refused = {
        "tools": MESSAGES_API,
        "tool_choice": MESSAGES_API,
        "parallel_tool_calls": MESSAGES_API,
        "functions": MESSAGES_API,
        "function_call": MESSAGES_API,
        "presence_penalty": NOT_CARRIED + " (TGI has frequency_penalty and repetition_penalty)",
        "logit_bias": NOT_CARRIED,
        "user": NOT_CARRIED,
        "metadata": NOT_CARRIED,
        "store": NOT_CARRIED + " (nothing is stored)",
        "audio": NOT_CARRIED,
        "modalities": NOT_CARRIED,
        "moderation": NOT_CARRIED,
        "prediction": NOT_CARRIED,
        "prompt_cache_key": NOT_CARRIED,
        "prompt_cache_options": NOT_CARRIED,
        "prompt_cache_retention": NOT_CARRIED,
        "safety_identifier": NOT_CARRIED,
        "service_tier": NOT_CARRIED,
        "verbosity": NOT_CARRIED,
        "web_search_options": NOT_CARRIED,
        "reasoning_effort": NOT_CARRIED,
        "best_of": NOT_CARRIED,
        "echo": NOT_CARRIED,
        "suffix": NOT_CARRIED,
    }
    stop_name = "stop"
    computed_fields = frozenset(
        {
            "details",
            "max_new_tokens",
            "do_sample",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "frequency_penalty",
            "top_n_tokens",
            "grammar",
        }
    )

    def logprobs_parameters(self, request: AnyRequest, stream: bool, parameters: dict[str, Any]) -> None:
        wanted = LogprobsWanted.of(request)
        if wanted is not None and wanted.top:
            # TGI's own name: the n most likely tokens at each step, sent as top_tokens.
            parameters["top_n_tokens"] = wanted.top

    def format_parameters(self, request: AnyRequest, parameters: dict[str, Any]) -> None:
        """TGI's grammar for OpenAI's response_format: guided decoding to a JSON Schema."""
        response_format = getattr(request, "response_format", None)  # chat only
        if response_format is None or response_format.type == "text":
            return
        if response_format.type == "json_object":
            parameters["grammar"] = {"type": "json", "value": {"type": "object"}}
        else:
            parameters["grammar"] = {
                "type": "json",
                "value": response_format.json_schema.json_schema or {"type": "object"},
            }
