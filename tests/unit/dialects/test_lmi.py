"""The lmi dialect: TGI's events under other names, its whole answers, and what its parameters cannot carry."""

from __future__ import annotations

import pytest

from sagestream.delta import Delta, Usage
from sagestream.dialects import UpstreamStreamError, dialect_named
from sagestream.protocols.openai.request import parse_chat, parse_completion
from tests.unit.test_dialects import chat, refused


def test_lmi_body_is_an_object_and_details_are_optional() -> None:
    assert dialect_named("lmi").decode_body(b'{"generated_text": "plain"}') == Delta("plain")
    body = b'{"generated_text": "x", "details": {"finish_reason": "length", "generated_tokens": 8, "inputs": "q"}}'
    assert dialect_named("lmi").decode_body(body) == Delta("x", finish_reason="length", usage=Usage(None, 8, None))


def test_lmi_error_body_raises_upstream_stream_error() -> None:
    body = b'{"generated_text": "", "details": {"finish_reason": "error", "generated_tokens": null}}'
    with pytest.raises(UpstreamStreamError):
        dialect_named("lmi").decode_body(body)


def test_lmi_body_names_stop_sequences_as_lmi_does() -> None:
    request = parse_completion(b'{"prompt": "Q:", "stop": ["\\n", "A:"]}', max_tokens_limit=None)
    body = dialect_named("lmi").body(request, prompt_template=None, stream=True, max_tokens_default=128)
    assert body == {
        "inputs": "Q:",
        "parameters": {"details": True, "max_new_tokens": 128, "stop_sequences": ["\n", "A:"]},
        "stream": True,
    }


def test_lmi_logprobs_need_a_stream_and_its_penalties_are_carried() -> None:
    assert refused("lmi", chat(logprobs=True), stream=False).param == "logprobs"
    request = parse_chat(chat(presence_penalty=0.3, frequency_penalty=0.2, logprobs=True), max_tokens_limit=None)
    body = dialect_named("lmi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert (body["parameters"]["presence_penalty"], body["parameters"]["frequency_penalty"]) == (0.3, 0.2)
