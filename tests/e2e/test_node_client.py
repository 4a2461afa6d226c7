"""The openai and @anthropic-ai/sdk npm packages, and the Vercel AI SDK's providers, under Node through the local
stack: a tool call fragment by fragment, thinking, and reasoning read from summaries.

``make test`` installs the package from ``tests/node/package-lock.json`` (``npm ci --prefix tests/node``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def run_node(stack: LocalStack, script: str, *, package: str, base_path: str) -> Any:
    """Run ``tests/node/<script>`` against ``stack`` (at its loopback URL plus ``base_path``: the scripts refuse
    any other) and return the JSON it prints of what its SDK saw; fail if Node or the npm ``package`` is missing.
    """
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / package).is_dir():
        pytest.fail(f"Node and the {package} npm package are needed: run `make test` (npm ci --prefix tests/node)")
    done = subprocess.run(
        [node, str(NODE_DIR / script)],
        env={**os.environ, "SAGESTREAM_BASE_URL": stack.url + base_path, "SAGESTREAM_MODEL": SIM_ENDPOINT_NAME},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_node_sdk_streams_a_tool_call(stack: LocalStack) -> None:
    seen = run_node(stack, "stream_tool_call.mjs", package="openai", base_path="/v1")
    assert stack.endpoint is not None
    first = next(r for r in stack.endpoint.records if r.operation == "InvokeEndpointWithResponseStream")
    fragments_sent = [t.text for t in first.tokens[1:]]  # token 0 is the call's head
    assert len(seen["ids"]) == 1
    assert seen["head"]["index"] == 0 and seen["head"]["type"] == "function"
    assert seen["head"]["name"] == "get_weather" and seen["head"]["id"].startswith("chatcmpl-tool-")
    assert seen["fragments"] == fragments_sent and len(fragments_sent) > 3
    assert seen["finishReason"] == "tool_calls"
    (call,) = seen["finalToolCalls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == json.loads("".join(fragments_sent))


def test_the_anthropic_node_sdk_streams_a_tool_use(stack: LocalStack) -> None:
    seen = run_node(stack, "anthropic_stream_tool.mjs", package="@anthropic-ai/sdk", base_path="")
    assert stack.endpoint is not None
    first = next(r for r in stack.endpoint.records if r.operation == "InvokeEndpointWithResponseStream")
    fragments_sent = [t.text for t in first.tokens[1:]]  # token 0 is the call's head
    assert seen["types"][0] == "message_start" and seen["types"][-1] == "message_stop"
    assert seen["head"]["index"] == 0 and seen["head"]["name"] == "get_weather"
    assert seen["fragments"] == fragments_sent and len(fragments_sent) > 3
    assert seen["stopReason"] == "tool_use"
    (block,) = seen["finalContent"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather"
    assert block["input"] == json.loads("".join(fragments_sent))
    assert seen["finalStopReason"] == "tool_use"


def test_the_node_sdk_streams_a_responses_tool_call_and_its_round_trip(stack: LocalStack) -> None:
    seen = run_node(stack, "stream_response_tool_call.mjs", package="openai", base_path="/v1")
    assert stack.endpoint is not None
    first = next(r for r in stack.endpoint.records if r.operation == "InvokeEndpointWithResponseStream")
    fragments_sent = [t.text for t in first.tokens[1:]]  # token 0 is the call's head
    assert seen["types"][:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert seen["types"][-1] == "response.completed" and seen["status"] == "completed"
    assert seen["sequence"] == list(range(len(seen["types"])))
    assert seen["fragments"] == fragments_sent and len(fragments_sent) > 3  # not re-chunked
    assert seen["call"]["name"] == "get_weather" and seen["call"]["arguments"] == "".join(fragments_sent)
    assert seen["finalStatus"] == "completed" and seen["finalText"]
    sent = json.loads(stack.endpoint.records[-1].body)["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": seen["call"]["call_id"], "content": '{"sky": "clear"}'}


def test_the_vercel_anthropic_provider_streams_text_thinking_and_a_tool_call(stack: LocalStack) -> None:
    """@ai-sdk/anthropic validates every event with zod: a null usage count failed each stream, before any text."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=4)
    seen = run_node(stack, "vercel_anthropic.mjs", package="@ai-sdk/anthropic", base_path="/v1")
    text, call = seen["text"], seen["call"]
    assert text["errors"] == [] and call["errors"] == []
    record = next(r for r in stack.endpoint.records if r.operation == "InvokeEndpointWithResponseStream")
    thoughts = "".join(t.text for t in record.tokens[:4])
    assert text["reasoning"] == thoughts and text["text"] and text["finishReason"] == "stop"
    assert isinstance(text["usage"]["inputTokens"], int) and text["usage"]["outputTokens"] > 0
    assert call["toolCalls"] == [{"name": "get_weather", "input": {"city": "Paris"}}]
    assert call["finishReason"] == "tool-calls"


def test_the_vercel_openai_provider_reads_reasoning_from_its_summaries(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=4)
    seen = run_node(stack, "vercel_openai_responses.mjs", package="@ai-sdk/openai", base_path="/v1")
    record = stack.endpoint.records[-1]
    assert seen["errors"] == [] and seen["finishReason"] == "stop"
    assert seen["reasoning"] == "".join(t.text for t in record.tokens[:4]) and seen["text"]
