"""Real clients through the local REST front (``make run FRONT=rest`` with keys): the OpenAI SDK's streaming
chat and the anthropic SDK's streamed message arrive as through the Function URL, and API Gateway's own 403
and 429 reach them as the errors those SDKs raise for those statuses.

The key goes as ``x-api-key``, the one header API Gateway reads: both SDKs are given it in ``default_headers``
(each sends its ``api_key`` as ``Authorization: Bearer``). Each client gets the stack's loopback URL and refuses
any other; proxies point at a dead loopback port, so a call meant for a public host fails instead of leaving
this machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.conftest import PYTHONPATH
from tests.e2e.conftest import FAST

MODEL = SIM_ENDPOINT_NAME
KEY, OTHER_KEY = "sk-rest-e2e-aaaa", "sk-rest-e2e-bbbb"  # made up for these tests
DEAD_PROXY = "http://127.0.0.1:9"
ASK = [{"role": "user", "content": "Name three prime numbers."}]


@pytest.fixture(autouse=True)
def no_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, DEAD_PROXY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")


@pytest.fixture(scope="module")
def rest() -> Iterator[LocalStack]:
    stack = LocalStack(
        port=0,
        concurrency=2,
        timeout_s=60.0,
        env={"PYTHONPATH": PYTHONPATH, "API_KEYS": f"{KEY},{OTHER_KEY}", "UPSTREAM_MAX_ATTEMPTS": "1"},
        scenario=FAST,
        upstream="simulated",
        front="rest",
        throttle_rate=50.0,
        throttle_burst=50,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


def loopback(stack: LocalStack) -> str:
    url = stack.url
    assert url and url.startswith("http://127.0.0.1:"), f"not a loopback URL: {url!r}"
    return url


def openai_client(stack: LocalStack, key: str | None = KEY) -> openai.OpenAI:
    headers = {"x-api-key": key} if key else {}
    return openai.OpenAI(
        base_url=loopback(stack) + "/v1", api_key="unused", default_headers=headers, max_retries=0, timeout=30
    )


def anthropic_client(stack: LocalStack, key: str = KEY) -> anthropic.Anthropic:
    # The anthropic SDK (2.x here) sends its api_key as Authorization: Bearer, which API Gateway does not read.
    return anthropic.Anthropic(
        base_url=loopback(stack), api_key="unused", default_headers={"x-api-key": key}, max_retries=0, timeout=30
    )


def test_the_openai_sdk_streams_a_chat_through_the_rest_front(rest: LocalStack) -> None:
    assert rest.endpoint is not None
    rest.endpoint.clear_records()
    chunks = list(
        openai_client(rest).chat.completions.create(
            model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    record = rest.endpoint.records[-1]
    assert text == [t.text for t in record.tokens] and len(text) > 3  # one chunk per token the endpoint sent
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(record.tokens)


def test_the_anthropic_sdk_streams_a_message_through_the_rest_front(rest: LocalStack) -> None:
    assert rest.endpoint is not None
    with anthropic_client(rest).messages.stream(model=MODEL, max_tokens=5, messages=ASK) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    record = rest.endpoint.records[-1]
    assert text == "".join(t.text for t in record.tokens) and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 5


def test_api_gateways_403_reaches_each_sdk_as_permission_denied(rest: LocalStack) -> None:
    with pytest.raises(openai.PermissionDeniedError) as denied:
        openai_client(rest, key=None).chat.completions.create(model=MODEL, messages=ASK)  # type: ignore[arg-type]
    assert denied.value.status_code == 403 and denied.value.body == {"message": "Forbidden"}
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        anthropic_client(rest, key="sk-rest-e2e-wrong").messages.create(model=MODEL, max_tokens=5, messages=ASK)  # type: ignore[arg-type]
    assert refused.value.status_code == 403
    assert openai_client(rest).models.list().data[0].id == MODEL  # the next request is served


def test_api_gateways_429_reaches_the_sdk_as_a_rate_limit() -> None:
    with LocalStack(
        port=0,
        concurrency=1,
        timeout_s=60.0,
        env={"PYTHONPATH": PYTHONPATH, "API_KEYS": KEY},
        scenario=FAST,
        upstream="simulated",
        front="rest",
        throttle_rate=0.5,
        throttle_burst=1,
    ) as stack:
        sdk = openai_client(stack)
        assert sdk.models.list().data[0].id == MODEL  # the burst of one
        with pytest.raises(openai.RateLimitError) as limited:
            sdk.models.list()
        assert limited.value.status_code == 429 and limited.value.body == {"message": "Too Many Requests"}
