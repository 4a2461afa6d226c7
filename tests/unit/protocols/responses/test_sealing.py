"""A reasoning item's encrypted_content: sealed when asked for, read back on the next turn."""

from __future__ import annotations

import json

from sagestream.delta import Delta
from sagestream.protocols.responses.encoder import response_json
from tests.unit.protocols.responses.test_encoder import encode_all, sdk_accumulates
from tests.unit.protocols.responses.test_request import parse


def test_reasoning_asked_for_as_encrypted_content_comes_back_and_is_read_on_the_next_turn() -> None:
    body = {"input": "Hi", "stream": True, "include": ["reasoning.encrypted_content"], "store": False}
    writes = encode_all([Delta(reasoning_content="Let me é"), Delta("Hi"), Delta(finish_reason="stop")], body)
    _, final = sdk_accumulates(writes)
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    # What a store:false client (Codex) sends back: the item without its text, the sealed content only.
    again = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    parsed = parse({"input": [{"role": "user", "content": "Hi"}, again, {"role": "assistant", "content": "Hi"}]})
    assert parsed.request.messages[1].reasoning_content == "Let me é"
    whole = json.loads(response_json(Delta("Hi", reasoning_content="Hm"), parse(body).original, model="m"))
    sealed = {
        "type": "reasoning",
        "id": "rs_2",
        "summary": [],
        "encrypted_content": whole["output"][0]["encrypted_content"],
    }
    assert (
        parse({"input": [sealed, {"role": "assistant", "content": "Hi"}]}).request.messages[0].reasoning_content == "Hm"
    )
