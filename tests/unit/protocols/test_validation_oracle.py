"""The msgspec request validation against the pydantic one it replaced (tests/oracle): the same random bodies,
on every client protocol, are accepted or refused alike, and a refusal names the same field (or the field
inside it at fault, where the old one stopped at a union).

Each body is a valid request of the protocol with at most one fault put in (a wrong type, a value out of
range, an unknown field, a missing one, a bad tag): with two faults the two validations may name different
ones (pydantic reported every fault and picked one, msgspec stops at the first), and either is right.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.protocols.anthropic import request as messages_new
from sagestream.protocols.openai import request as openai_new
from sagestream.protocols.responses import request as responses_new
from tests.oracle import anthropic_request as messages_old
from tests.oracle import openai_request as openai_old
from tests.oracle import responses_request as responses_old

CFG = Config(endpoint_name="llm", model_id="m")
text = st.text(max_size=8)
BAD = st.sampled_from([None, 5, -1, 2.5, True, "x", [], {}, [1, "a"], 10**6])


def _chat_message() -> st.SearchStrategy[dict[str, Any]]:
    parts = st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, text),
            st.builds(lambda u: {"type": "image_url", "image_url": {"url": "https://x/" + u}}, text),
        ),
        min_size=1,
        max_size=2,
    )
    return st.one_of(
        st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["system", "developer", "user"]), text),
        st.builds(lambda c: {"role": "user", "content": c}, parts),
        st.builds(lambda c: {"role": "assistant", "content": c}, text),
    )


CHAT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": text,
    "max_tokens": st.integers(1, 100),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "stop": st.one_of(text, st.lists(text, max_size=4)),
    "stream": st.booleans(),
    "seed": st.integers(-5, 5),
    "presence_penalty": st.floats(-2, 2),
    "logprobs": st.booleans(),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
    "tools": st.just([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
    "tool_choice": st.sampled_from(["none", "auto"]),
    "reasoning_effort": st.sampled_from(["low", "high"]),
    "metadata": st.dictionaries(text, text, max_size=2),
    "n": st.just(1),
}

MESSAGES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": text,
    "system": text,
    "stop_sequences": st.lists(text, max_size=2),
    "stream": st.booleans(),
    "temperature": st.floats(0, 1),
    "top_p": st.floats(0, 1),
    "metadata": st.builds(lambda u: {"user_id": u}, text),
    "tools": st.just([{"name": "f", "input_schema": {"type": "object"}}]),
    "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}]),
    "thinking": st.sampled_from([{"type": "disabled"}, {"type": "adaptive"}]),
    "service_tier": st.sampled_from(["auto", "standard_only"]),
}

RESPONSES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": text,
    "instructions": text,
    "max_output_tokens": st.integers(1, 100),
    "temperature": st.floats(0, 2),
    "stream": st.booleans(),
    "store": st.booleans(),
    "text": st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}}, {"verbosity": "low"}]),
    "reasoning": st.sampled_from([{"effort": "low"}, {"summary": "auto"}]),
    "tools": st.just([{"type": "function", "name": "f", "parameters": {"type": "object"}}]),
    "tool_choice": st.sampled_from(["auto", "none", {"type": "function", "name": "f"}]),
    "metadata": st.dictionaries(text, text, max_size=2),
    "parallel_tool_calls": st.booleans(),
}


def _input_item() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda c: {"role": "user", "content": c}, text),
        st.builds(lambda c: {"type": "message", "role": "user", "content": [{"type": "input_text", "text": c}]}, text),
        st.builds(
            lambda c: {"role": "assistant", "content": [{"type": "output_text", "text": c, "annotations": []}]}, text
        ),
    )


def _body(required: st.SearchStrategy[dict[str, Any]], optional: dict[str, st.SearchStrategy[Any]]) -> Any:
    return st.builds(
        lambda base, extra: {**base, **extra},
        required,
        st.fixed_dictionaries({}, optional=optional),
    )


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the body a fault can go: each key and each list element."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*path, key))
    elif isinstance(value, list):
        for n, child in enumerate(value):
            found += _paths(child, (*path, n))
    return found


@st.composite
def _with_one_fault(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    body = json.loads(json.dumps(draw(bodies)))
    fault = draw(st.sampled_from(["none", "replace", "unknown", "delete"]))
    paths = _paths(body)
    if fault == "none" or not paths:
        return body
    path = draw(st.sampled_from(paths))
    *parent_path, last = path
    parent: Any = body
    for step in parent_path:
        parent = parent[step]
    if fault == "replace":
        parent[last] = draw(BAD)
    elif fault == "unknown" and isinstance(parent, dict):
        parent["zz_" + draw(st.text("abc", min_size=1, max_size=3))] = 1
    elif fault == "delete" and isinstance(parent, dict):
        del parent[last]
    return body


def _outcome(parse: Callable[[bytes], Any], raw: bytes, *, old: bool = False) -> tuple[str, str | None]:
    try:
        parse(raw)
    except APIError as err:
        return "refused", err.param
    except Exception:
        if not old:
            raise
        return "crashed", None  # the old code's bug (a 500): the new one must refuse the body instead
    return "accepted", None


def _same(old: Callable[[bytes], Any], new: Callable[[bytes], Any], body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    (verdict, param), (old_verdict, old_param) = _outcome(new, raw), _outcome(old, raw, old=True)
    event(verdict)  # both kinds must come up: --hypothesis-show-statistics shows how often
    if old_verdict == "crashed":
        assert verdict == "refused", body
        return
    assert verdict == old_verdict, body
    # The same field, or one inside it: the old Messages reader named a union whose tag was bad by the union
    # itself ("tool_choice"); the new one names the tag ("tool_choice.type").
    assert param == old_param or (param or "").startswith(f"{old_param}."), (body, param, old_param)


SETTINGS = settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
CHAT = _body(st.builds(lambda m: {"messages": m}, st.lists(_chat_message(), min_size=1, max_size=3)), CHAT_FIELDS)
COMPLETION = _body(
    st.builds(lambda p: {"prompt": p}, st.one_of(text, st.lists(text, min_size=1, max_size=1))),
    {k: CHAT_FIELDS[k] for k in ("model", "max_tokens", "temperature", "stop", "stream", "seed")},
)
MESSAGES = _body(
    st.builds(
        lambda n, c: {"max_tokens": n, "messages": [{"role": "user", "content": c}]},
        st.integers(1, 50),
        st.one_of(text, st.just([{"type": "text", "text": "Hi"}])),
    ),
    MESSAGES_FIELDS,
)
RESPONSES = _body(
    st.builds(lambda i: {"input": i}, st.one_of(text.filter(bool), st.lists(_input_item(), min_size=1, max_size=3))),
    RESPONSES_FIELDS,
)


def _chat(module: Any) -> Callable[[bytes], Any]:
    return lambda raw: module.parse_chat(raw, max_tokens_limit=64)


def _completion(module: Any) -> Callable[[bytes], Any]:
    return lambda raw: module.parse_completion(raw, max_tokens_limit=64)


def _messages(module: Any) -> Callable[[bytes], Any]:
    return lambda raw: module.parse(module.body_of(raw), CFG)


def _responses(module: Any) -> Callable[[bytes], Any]:
    return lambda raw: module.parse_responses(raw, max_tokens_limit=64)


# Per protocol: its bodies, and its parse as (pydantic's, msgspec's).
PROTOCOLS = {
    "chat": (CHAT, _chat(openai_old), _chat(openai_new)),
    "completion": (COMPLETION, _completion(openai_old), _completion(openai_new)),
    "messages": (MESSAGES, _messages(messages_old), _messages(messages_new)),
    "responses": (RESPONSES, _responses(responses_old), _responses(responses_new)),
}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@SETTINGS
@given(data=st.data())
def test_bodies_are_judged_as_before(protocol: str, data: st.DataObject) -> None:
    bodies, old, new = PROTOCOLS[protocol]
    _same(old, new, data.draw(_with_one_fault(bodies), label="body"))
