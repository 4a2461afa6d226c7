"""Quotas against a real engine: the function asks vLLM for its usage on every stream (``stream_options``) and
settles each request to exactly that count, whether or not the client asked to see it; a client that did not
ask gets no usage chunk. The session's one engine serves a second local stack, the one with ``QUOTAS`` set."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from sagestream_local.container_front import ContainerFront
from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.stack import LocalStack
from sagestream_local.vllm_engine import VllmEngine
from tests.engine.conftest import engine_env

pytestmark = pytest.mark.timeout(300)  # the first test of a run may pay for the engine's start

KEY = "sk-engine-quota"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def quota_stack(front: ContainerFront, engine: VllmEngine) -> Iterator[LocalStack]:
    """A second stack on the session's engine, with QUOTAS (its counts in moto's DynamoDB, which it starts)."""
    env = {
        **engine_env(front, engine),
        "AUTH_MODE": "api_key",
        "API_KEYS": KEY,
        "QUOTAS": "tokens_per_minute=100000000 requests_per_minute=100000",
    }
    with LocalStack(port=0, concurrency=1, timeout_s=120.0, env=env) as stack:
        yield stack


def minute_tokens(db: LocalDynamoDB) -> int:
    digest = hashlib.sha256(("key:" + hashlib.sha256(KEY.encode()).hexdigest()[:16]).encode()).hexdigest()[:32]
    pk = f"{digest}#minute#{int(time.time() // 60)}"
    item = db.client().get_item(TableName=db.quotas_table, Key={"pk": {"S": pk}}, ConsistentRead=True)
    return int(item.get("Item", {}).get("tokens", {}).get("N", "0"))


def charged(db: LocalDynamoDB, action: Any) -> int:
    """What ``action`` added to the key's minute once its settle ran (just after the response was closed)."""
    before = minute_tokens(db)
    action()
    deadline, now = time.monotonic() + 10, minute_tokens(db)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        later = minute_tokens(db)
        if later == now and later != before:
            break
        now = later
    return minute_tokens(db) - before


def test_each_stream_is_charged_vllms_own_usage(quota_stack: LocalStack, engine: VllmEngine) -> None:
    if 60 - time.time() % 60 < 15:
        time.sleep(60 - time.time() % 60 + 0.2)  # both requests within one minute's item
    assert quota_stack.dynamodb is not None
    client = openai.OpenAI(base_url=quota_stack.url + "/v1", api_key=KEY, max_retries=0)
    seen: list[Any] = []

    def silent() -> None:
        raw = client.chat.completions.with_raw_response.create(
            model=engine.model_name, messages=ASK, stream=True, max_tokens=8, temperature=0
        )
        assert raw.headers["x-ratelimit-limit-tokens"] == "100000000"
        seen.extend(raw.parse())

    def asking() -> None:
        seen.extend(
            client.chat.completions.create(
                model=engine.model_name,
                messages=ASK,
                stream=True,
                max_tokens=8,
                temperature=0,
                stream_options={"include_usage": True},
            )
        )

    first = charged(quota_stack.dynamodb, silent)
    assert seen and all(chunk.usage is None for chunk in seen), "a client that did not ask sees no usage"
    seen.clear()
    second = charged(quota_stack.dynamodb, asking)
    usage = [chunk.usage for chunk in seen if chunk.usage is not None]
    assert len(usage) == 1 and usage[0].total_tokens > 8
    # Both were charged vLLM's count (the same prompt and, at temperature 0, the same 8 tokens): not an estimate.
    assert first == second == usage[0].total_tokens
