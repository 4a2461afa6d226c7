"""The Responses API: its request read and translated into the chat-shaped request, its stream event by event,
its whole response, its refusals by name.

The streamed events are checked against the openai SDK's own accumulator (``ResponseStreamState``, what
``responses.stream()`` runs): it raises on an event out of order, an unknown item, a changed id.
"""

from __future__ import annotations

import json
from typing import Any

from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from sagestream.delta import Delta, Usage
from sagestream.dialects import UpstreamStreamError, dialect_named
from sagestream.faults import DeadlineReached
from sagestream.protocols.openai.encoder import ChunkEncoder
from sagestream.protocols.responses.encoder import ResponsesEncoder, response_json
from sagestream.relay import relay
from tests.fakes import load_app
from tests.unit.protocols.responses.test_request import TOOL, parse

CALL_HEAD = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}


def split(data: bytes) -> list[dict[str, Any]]:
    """The JSON of each SSE event in one write; its ``event:`` line must name its type."""
    out = []
    for event in data.split(b"\n\n")[:-1]:
        if event.startswith(b":"):
            continue  # padding
        head, body = event.split(b"\n", 1)
        payload = json.loads(body.removeprefix(b"data: "))
        assert head == b"event: " + payload["type"].encode()
        out.append(payload)
    return out


def sdk_accumulates(writes: list[bytes], tools: list[Any] | None = None) -> tuple[list[Any], Any]:
    """Feed the events to the SDK's accumulator; its events and its final response (None without completed)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=tools or [], text_format=omit)
    seen = []
    for data in writes:
        for payload in split(data):
            seen += state.handle_event(construct_type(type_=ResponseStreamEvent, value=payload))  # type: ignore[arg-type]
    return seen, state._completed_response


def encode_all(deltas: list[Delta], body: dict[str, Any] | None = None) -> list[bytes]:
    encoder = ResponsesEncoder(parse(body or {"input": "Hi", "stream": True}).original, model="m")
    writes = [encoder.encode(delta) for delta in deltas]
    return [*writes, encoder.done()]


# --- the stream ---------------------------------------------------------------------------------------------


def test_text_streams_event_by_event_and_the_sdk_accumulates_the_final_response() -> None:
    writes = encode_all(
        [
            Delta(role="assistant"),
            Delta("Hé"),
            Delta(" there"),
            Delta("!"),
            Delta(finish_reason="stop"),
            Delta(usage=Usage(5, 3, 8)),
        ]
    )
    payloads = [p for w in writes for p in split(w)]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert [p["type"] for p in split(writes[0])] == ["response.created", "response.in_progress"]
    # The first token's write announces its item and part before it.
    assert [p["type"] for p in split(writes[1])] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert [p["delta"] for w in writes[1:4] for p in split(w) if "delta" in p] == ["Hé", " there", "!"]
    assert writes[5] == b""  # usage alone: kept for the end
    _, final = sdk_accumulates(writes)
    assert final.output_text == "Hé there!" and final.status == "completed"
    assert final.usage.model_dump(exclude_none=True) == {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 8,
    }
    assert len({p["item_id"] for p in payloads if "item_id" in p}) == 1


def test_the_text_fast_path_writes_what_the_general_path_would() -> None:
    fast = ResponsesEncoder(parse({"input": "Hi"}).original, model="m", id="resp_1", created_at=0)
    general = ResponsesEncoder(parse({"input": "Hi"}).original, model="m", id="resp_1", created_at=0)
    fast.encode(Delta("a"))
    general.encode(Delta("a"))
    general._items.open.id = fast._items.open.id  # type: ignore[union-attr]
    for text in ('"quoted" \\ \n', "é😀", "\x00"):
        assert split(fast.encode(Delta(text))) == split(general._encode(Delta(text)))


def test_a_tool_call_streams_each_fragment_as_the_container_sent_it() -> None:
    fragments = ['{"ci', 'ty": "Pa', 'ris"}']
    deltas = [
        Delta(tool_calls=[CALL_HEAD]),
        *(Delta(tool_calls=[{"index": 0, "function": {"arguments": f}}]) for f in fragments),
        Delta(finish_reason="tool_calls"),
    ]
    writes = encode_all(deltas, {"input": "Hi", "tools": [TOOL], "stream": True})
    sent = [p["delta"] for w in writes for p in split(w) if p["type"] == "response.function_call_arguments.delta"]
    assert sent == fragments  # not re-chunked
    _, final = sdk_accumulates(writes, [TOOL])
    (call,) = final.output
    assert (call.type, call.call_id, call.name, call.arguments) == (
        "function_call",
        "call_1",
        "get_weather",
        "".join(fragments),
    )
    assert final.usage is None  # no count was reported: none is made up


def test_two_calls_are_two_items_in_order() -> None:
    second = {"index": 1, "id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    writes = encode_all(
        [
            Delta(tool_calls=[CALL_HEAD]),
            Delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}]),
            Delta(tool_calls=[second]),
            Delta(finish_reason="tool_calls"),
        ],
        {"input": "Hi", "tools": [TOOL], "stream": True},
    )
    _, final = sdk_accumulates(writes, [TOOL])
    assert [(item.call_id, item.arguments) for item in final.output] == [("call_1", "{}"), ("call_2", "{}")]


def test_reasoning_is_its_own_item_before_the_message_and_its_tokens_are_counted() -> None:
    usage = Usage(5, 4, 9, {"completion_tokens_details": {"reasoning_tokens": 2}})
    writes = encode_all(
        [
            Delta(reasoning_content="Let me"),
            Delta(reasoning_content=" think"),
            Delta("Hi"),
            Delta(finish_reason="stop", usage=usage),
        ]
    )
    kinds = [p["type"] for w in writes for p in split(w)]
    assert kinds.count("response.reasoning_text.delta") == 2
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    _, final = sdk_accumulates(writes)
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Let me think"
    assert final.usage.output_tokens_details.reasoning_tokens == 2


def test_usage_without_a_prompt_count_says_0_as_openais_types_require_an_integer() -> None:
    writes = encode_all([Delta("Hi"), Delta(finish_reason="stop", usage=Usage(None, 1, None))])
    last = split(writes[-1])[-1]
    assert last["response"]["usage"] == {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 1,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1,
    }


def test_a_length_cut_ends_with_response_incomplete_and_its_reason() -> None:
    writes = encode_all([Delta("Hi"), Delta(finish_reason="length")])
    last = split(writes[-1])[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"


VLLM_TOKENS = [
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":" there"}}]}\n\n',
]


def relayed(parts: Any) -> list[tuple[Any, bytes]]:
    encoder = ResponsesEncoder(parse({"input": "Hi", "stream": True}).original, model="m")
    return list(relay(parts, dialect_named("openai").stream_decoder(), encoder))


def test_the_relay_writes_one_write_per_delta_and_the_end() -> None:
    items = relayed([*VLLM_TOKENS, b"data: [DONE]\n\n"])
    assert [type(item).__name__ for item, _ in items] == ["Delta", "Delta", "Delta", "Delta", "NoneType"]
    _, final = sdk_accumulates([data for _, data in items])
    assert final.output_text == "Hi there"


def test_the_deadline_after_the_first_byte_ends_incomplete_and_never_completed() -> None:
    def parts() -> Any:
        yield from VLLM_TOKENS
        raise DeadlineReached()

    items = relayed(parts())
    payloads = [p for _, data in items for p in split(data)]
    kinds = [p["type"] for p in payloads]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds and "error" not in kinds
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == "Hi there"  # what was sent stays
    events, final = sdk_accumulates([data for _, data in items])
    assert final is None and events[-1].type == "response.incomplete"


def test_a_failure_after_the_first_byte_is_an_error_event_then_response_failed() -> None:
    def parts() -> Any:
        yield from VLLM_TOKENS
        raise UpstreamStreamError("the model died")

    items = relayed(parts())
    payloads = [p for p in split(items[-1][1])]
    kinds = [p["type"] for p in payloads]
    assert kinds[-2:] == ["error", "response.failed"]
    assert "the model died" in payloads[-2]["message"] and payloads[-1]["response"]["status"] == "failed"
    assert payloads[-1]["response"]["error"]["code"] == "server_error"
    events, final = sdk_accumulates([data for _, data in items])  # the SDK accepts the sequence
    assert final is None and events[-1].type == "response.failed"


def test_padding_follows_each_write_that_carries_events() -> None:
    encoder = ResponsesEncoder(parse({"input": "Hi"}).original, model="m", pad_bytes=16)
    first, second = encoder.encode(Delta("a")), encoder.encode(Delta("b"))
    assert first.endswith(b":" + b" " * 13 + b"\n\n") and second.endswith(b":" + b" " * 13 + b"\n\n")


# --- the whole response -------------------------------------------------------------------------------------


def test_a_whole_answer_is_one_response_object_the_sdk_reads() -> None:
    from openai.types.responses import Response

    answer = Delta("Hi", finish_reason="stop", usage=Usage(3, 1, 4), reasoning_content="Hm")
    # As the SDK reads a body: constructed, not validated (usage details the container did not give stay out).
    body = json.loads(response_json(answer, parse({"input": "Hi"}).original, model="m"))
    response = construct_type(type_=Response, value=body)
    assert isinstance(response, Response)
    assert response.output_text == "Hi" and [i.type for i in response.output] == ["reasoning", "message"]
    assert response.usage is not None and response.usage.total_tokens == 4


def test_a_whole_tool_call_is_a_function_call_item_without_an_empty_message() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body = json.loads(
        response_json(Delta(tool_calls=[call], finish_reason="tool_calls"), parse({"input": "Hi"}).original, model="m")
    )
    assert [(i["type"], i["call_id"], i["arguments"]) for i in body["output"]] == [("function_call", "call_1", "{}")]


# --- the route ----------------------------------------------------------------------------------------------

app = load_app()


def test_the_chat_encoder_and_this_one_read_the_same_deltas() -> None:
    # One pipeline: the same Delta list goes through both encoders; only the bytes differ.
    deltas = [Delta(role="assistant"), Delta("Hi"), Delta(finish_reason="stop")]
    chat = ChunkEncoder(model="m", kind="chat", include_usage=False)
    assert all(chat.encode(d) for d in deltas) and all(encode_all(deltas))


def test_a_refusal_is_a_message_with_a_refusal_part_streamed_and_whole() -> None:
    writes = encode_all([Delta(refusal="I can't"), Delta(refusal=" help."), Delta(finish_reason="stop")])
    kinds = [p["type"] for w in writes for p in split(w)]
    assert kinds.count("response.refusal.delta") == 2 and "response.output_text.delta" not in kinds
    _, final = sdk_accumulates(writes)
    (message,) = final.output
    assert message.type == "message" and message.content[0].type == "refusal"
    assert message.content[0].refusal == "I can't help."
    whole = json.loads(
        response_json(Delta(refusal="No.", finish_reason="stop"), parse({"input": "Hi"}).original, model="m")
    )
    assert [item["content"] for item in whole["output"]] == [[{"type": "refusal", "refusal": "No."}]]


def test_text_that_looks_like_the_encoders_own_markers_comes_back_unchanged() -> None:
    sly = 'A NUL \x00 and "\\u0000msg_" and %s %d'
    writes = encode_all([Delta(sly), Delta(sly), Delta(finish_reason="stop")])
    _, final = sdk_accumulates(writes)
    assert final.output_text == sly + sly


def test_the_written_close_of_a_message_is_what_its_items_say() -> None:
    writes = encode_all([Delta('Hé "x"'), Delta(" \\ y"), Delta(finish_reason="length")])
    text_done, part_done, item_done = split(writes[2])
    item = item_done["item"]
    assert item == {
        "id": item["id"],
        "type": "message",
        "status": "incomplete",
        "role": "assistant",
        "content": [{"type": "output_text", "text": 'Hé "x" \\ y', "annotations": []}],
    }
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    assert text_done == {
        "type": "response.output_text.done",
        **where,
        "text": 'Hé "x" \\ y',
        "logprobs": [],
        "sequence_number": text_done["sequence_number"],
    }
    assert part_done == {
        "type": "response.content_part.done",
        **where,
        "part": item["content"][0],
        "sequence_number": text_done["sequence_number"] + 1,
    }
    assert item_done["sequence_number"] == text_done["sequence_number"] + 2
    assert split(writes[3])[-1]["response"]["output"] == [item]


def test_reasoning_summary_asked_for_streams_the_reasoning_as_its_summary_too() -> None:
    body = {"input": "Hi", "stream": True, "reasoning": {"summary": "auto"}}
    writes = encode_all([Delta(reasoning_content="Let me "), Delta(reasoning_content="see."), Delta("Hi")], body)
    events = [e for data in writes for e in split(data)]
    kinds = [e["type"] for e in events]
    summary = [e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"]
    assert summary == ["Let me ", "see."]
    assert kinds.index("response.reasoning_summary_part.added") < kinds.index("response.reasoning_summary_text.delta")
    assert kinds.index("response.reasoning_summary_text.done") < kinds.index("response.reasoning_summary_part.done")
    _, final = sdk_accumulates(writes)
    assert final is not None and final.output[0].summary[0].text == "Let me see."
    assert [e["type"] for e in split(encode_all([Delta(reasoning_content="x"), Delta("y")])[0])].count(
        "response.reasoning_summary_text.delta"
    ) == 0, "without reasoning.summary nothing changes"


def test_a_namespaced_functions_call_carries_its_namespace() -> None:
    namespace = {"type": "namespace", "name": "crm", "description": "CRM.", "tools": [{**TOOL, "name": "find"}]}
    body = {"input": "Hi", "stream": True, "tools": [namespace]}
    head = {**CALL_HEAD, "function": {"name": "crm__find", "arguments": ""}}
    args = {"index": 0, "function": {"arguments": "{}"}}
    writes = encode_all([Delta(tool_calls=[head]), Delta(tool_calls=[args]), Delta(finish_reason="tool_calls")], body)
    done = [e for data in writes for e in split(data) if e["type"] == "response.output_item.done"]
    assert (done[0]["item"]["name"], done[0]["item"]["namespace"]) == ("find", "crm")
    whole = json.loads(
        response_json(
            Delta(
                tool_calls=[{**head, "function": {"name": "crm__find", "arguments": "{}"}}], finish_reason="tool_calls"
            ),
            parse(body).original,
            model="m",
        )
    )
    assert (whole["output"][0]["name"], whole["output"][0]["namespace"]) == ("find", "crm")
