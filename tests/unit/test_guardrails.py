"""sagestream.guardrails: an answer read, a call bounded in total, and the answer's stage in both modes over a
fake botocore client (the end-to-end tests put the real one in front of the stand-in)."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any

import msgspec
import pytest

from sagestream.config import GuardrailPolicy
from sagestream.delta import Delta, Usage
from sagestream.errors import APIError
from sagestream.guardrails import (
    END_RECORD,
    GuardrailError,
    Guardrails,
    OutputStage,
    prompt_text,
    verdict_of,
)
from sagestream.protocols.openai.request import ChatCompletionRequest
from sagestream.record import GuardrailNote
from sagestream_local.guardrail import Rules

BLOCKED = Rules().blocked_output_message


class FakeClient:
    """ApplyGuardrail answered by the stand-in's own rules, in process; ``gate`` holds each call until set."""

    def __init__(self, rules: Rules, *, gate: threading.Event | None = None, fail: Exception | None = None) -> None:
        self.rules, self.gate, self.fail = rules, gate, fail
        self.texts: list[str] = []

    def apply_guardrail(self, **kwargs: Any) -> dict[str, Any]:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        text = kwargs["content"][0]["text"]["text"]
        self.texts.append(text)
        return self.rules.apply(kwargs["source"], text)


class Decoder:
    """A dialect decoder whose records are the deltas' text ("!" ends the answer)."""

    done = False

    def decode(self, record: str) -> list[Delta]:
        if record == "!":
            return [Delta(finish_reason="stop")]
        if record == "usage":  # as vLLM sends it: after the finish, then the end
            self.done = True
            return [Delta(usage=Usage(5, 3, 8))]
        return [Delta(content=record)]


def stage(client: FakeClient, **policy: Any) -> OutputStage:
    rules = GuardrailPolicy("g", **policy)
    return OutputStage(Decoder(), Guardrails(client), rules, GuardrailNote(), deadline=time.monotonic() + 30)


def run(s: OutputStage, records: list[str]) -> list[Delta]:
    out: list[Delta] = []
    for record in [*records, END_RECORD]:
        out += s.decode(record)
        if s.done:
            break
    return out


def test_an_answer_is_read_and_anything_else_is_an_error() -> None:
    masked = verdict_of(Rules(pii=({"name": "N", "regex": "[0-9]+"},)).apply("OUTPUT", "call 555"))
    assert masked.intervened and not masked.blocked and masked.text == "call {N}" and masked.units == 1
    assert verdict_of({"action": "NONE", "outputs": []}).intervened is False
    for garbage in (None, [], {"action": "GUARDRAIL_INTERVENED", "assessments": [{"wordPolicy": 3}]}):
        with pytest.raises(GuardrailError):
            verdict_of(garbage)


def test_the_prompt_is_every_messages_text() -> None:
    body = b'{"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}]}'
    assert prompt_text(msgspec.json.decode(body, type=ChatCompletionRequest)) == "Be brief\nHi"


def test_a_call_is_bounded_in_total() -> None:
    gate = threading.Event()
    guard = Guardrails(FakeClient(Rules(), gate=gate), cap_s=0.2)
    started = time.monotonic()
    with pytest.raises(GuardrailError, match="did not answer"):
        guard.assess(GuardrailPolicy("g"), "text", "INPUT", deadline=None)
    assert 0.15 < time.monotonic() - started < 2.0
    gate.set()


def test_async_passes_every_delta_and_assesses_each_window_once() -> None:
    client = FakeClient(Rules(denied_words=("zorp",)))
    s = stage(client, window=10)
    out = run(s, ["hello ", "there ", "my ", "friend ", "!"])
    assert [d.content for d in out] == ["hello ", "there ", "my ", "friend ", ""]
    assert out[-1].finish_reason == "stop"
    # Each window once (the workers may answer in any order), cut between words, none over the window.
    assert sorted(client.texts) == sorted(["hello", " there my ", "friend "])
    assert s.note.assessments == len(client.texts) and s.note.intervened is None


def test_async_an_intervention_ends_the_answer_with_the_refusal() -> None:
    gate = threading.Event()
    client = FakeClient(Rules(denied_words=("zorp",)), gate=gate)
    s = stage(client, window=6)
    out = s.decode("a zorp")  # its window goes to a worker, held at the gate
    assert [d.content for d in out] == ["a zorp"] and len(s.pending) == 1
    assert s.decode("on") == [Delta(content="on")]  # not yet assessed: the text passes
    gate.set()
    futures.wait([f for f, _ in s.pending], timeout=10)
    ended = s.decode("more")
    assert [(d.content, d.finish_reason) for d in ended] == [(BLOCKED, "content_filter")]
    assert s.done and s.decode("after") == []
    assert s.note.intervened == "output" and s.note.reasons == ["word zorp: BLOCKED"]


def test_async_the_end_waits_for_the_last_window() -> None:
    client = FakeClient(Rules(denied_words=("zorp",)))
    out = run(stage(client, window=1000), ["fine ", "zorp", "!"])
    assert out[-1].finish_reason == "content_filter" and out[-1].content == BLOCKED
    assert [d.content for d in out[:-1]] == ["fine ", "zorp"]  # sent: async cannot take it back


def test_async_an_upstream_without_a_finish_reason_is_still_assessed_at_its_end() -> None:
    client = FakeClient(Rules(denied_words=("zorp",)))
    out = run(stage(client), ["fine ", "zorp"])
    assert out[-1].finish_reason == "content_filter"


def test_sync_holds_each_window_and_releases_it_masked() -> None:
    client = FakeClient(Rules(pii=({"name": "NUM", "regex": "[0-9]+"},)))
    s = stage(client, mode="sync", window=12)
    assert s.decode("call me ") == []  # held: the window is not full
    out = s.decode("at 5551234 ")
    assert [d.content for d in out] == ["call me at"]
    out += run(s, ["today", "!", "usage"])
    text = "".join(d.content for d in out)
    assert text == "call me at {NUM} today" and out[-2].finish_reason == "stop"
    assert out[-1].usage == Usage(5, 3, 8), "what comes after the finish is released, not held"


def test_sync_a_block_is_never_released() -> None:
    client = FakeClient(Rules(denied_words=("zorp",)))
    out = run(stage(client, mode="sync", window=100), ["say ", "zorp", "!"])
    assert [(d.content, d.finish_reason) for d in out] == [(BLOCKED, "content_filter")]


def test_a_failing_guardrail_raises_the_routes_503_closed_and_lets_text_through_open() -> None:
    down = FakeClient(Rules(), fail=ConnectionError("refused"))
    with pytest.raises(APIError) as caught:
        run(stage(down, window=4), ["some text", "!"])
    assert caught.value.status == 503 and caught.value.code == "guardrail_unavailable"
    s = stage(down, mode="sync", window=4, fail="open")
    out = run(s, ["some text", "!"])
    assert "".join(d.content for d in out) == "some text" and s.note.errors >= 1


def test_the_settings_and_each_models_own_guardrail() -> None:
    from sagestream.config import Config, ConfigError

    assert Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e"}).guardrail is None  # off by default
    one = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e", "GUARDRAIL_ID": "g1", "GUARDRAIL_OUTPUT_MODE": "SYNC"})
    assert one.guardrail == GuardrailPolicy("g1", mode="sync")
    models = (
        '{"a": {"endpoint": "e"}, "b": {"endpoint": "e", "guardrail": false},'
        ' "c": {"endpoint": "e", "guardrail": {"id": "g2", "window": 500, "sides": "output"}}}'
    )
    cfg = Config.from_env({"MODELS": models, "GUARDRAIL_ID": "g1", "GUARDRAIL_FAIL": "open"})
    a, b, c = (cfg.for_model(m) for m in "abc")
    assert a is not None and a.guardrail == GuardrailPolicy("g1", fail="open")
    assert b is not None and b.guardrail is None
    assert c is not None and c.guardrail == GuardrailPolicy("g2", window=500, sides="output", fail="open")
    with pytest.raises(ConfigError, match="guardrail needs an id"):
        Config.from_env({"MODELS": '{"a": {"endpoint": "e", "guardrail": {"mode": "sync"}}}'})
    with pytest.raises(ConfigError, match="key 'guardrail'"):
        Config.from_env({"MODELS": '{"a": {"endpoint": "e", "guardrail": {"mode": "later"}}}'})
