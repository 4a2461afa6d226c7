"""Gateway features end to end, through real clients: several models on one URL, the request id a client can
quote, and the retry budget one openai SDK call is held to under throttling."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagestream_local.stack import LocalStack
from tests.client import request
from tests.e2e.conftest import GetStack
from tests.e2e.test_telemetry import Captured, _captured, emf, logs
from tests.prerequisites import unavailable

openai = pytest.importorskip("openai")

CHAT = "/v1/chat/completions"
NODE_DIR = Path(__file__).resolve().parents[1] / "node"
MODELS = {
    "llama-3-8b": {"endpoint": "llm-a"},
    "qwen-7b": {"endpoint": "llm-b", "inference_component": "qwen-ic", "max_tokens_limit": 64},
}
MULTI = {"MODELS": json.dumps(MODELS), "SAGEMAKER_ENDPOINT_NAME": ""}


def sdk(stack: LocalStack, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused-in-iam-mode", **kw)


# --- several models --------------------------------------------------------------------------------------


def test_every_configured_model_is_listed_and_served_by_its_own_upstream(stack_for: GetStack) -> None:
    stack = stack_for(**MULTI)
    assert stack.endpoint is not None
    client = sdk(stack, max_retries=0)
    assert [m.id for m in client.models.list()] == ["llama-3-8b", "qwen-7b"]
    assert client.models.retrieve("qwen-7b").id == "qwen-7b"
    for model, upstream in MODELS.items():
        stack.endpoint.clear_records()
        with client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], stream=True
        ) as stream:
            chunks = list(stream)
        assert chunks and {c.model for c in chunks} == {model}, "each chunk names the model asked for"
        (record,) = stack.endpoint.records
        assert (record.endpoint, record.inference_component) == (
            upstream["endpoint"],
            upstream.get("inference_component"),
        )


def test_a_models_own_limit_applies_to_it_alone(stack_for: GetStack) -> None:
    client = sdk(stack_for(**MULTI), max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="qwen-7b", messages=[{"role": "user", "content": "Hi"}], max_tokens=65)
    assert refused.value.body["param"] == "max_tokens"  # type: ignore[index]
    ok = client.chat.completions.create(model="llama-3-8b", messages=[{"role": "user", "content": "Hi"}], max_tokens=65)
    assert ok.model == "llama-3-8b"


def test_another_model_is_404_and_no_model_is_400_when_several_are_served(stack_for: GetStack) -> None:
    stack = stack_for(**MULTI)
    assert stack.endpoint is not None
    unknown = request(stack.url, "POST", CHAT, {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert unknown.status == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert "llama-3-8b" in unknown.json()["error"]["message"]
    unnamed = request(stack.url, "POST", CHAT, {"messages": [{"role": "user", "content": "x"}]})
    assert unnamed.status == 400 and unnamed.json()["error"]["param"] == "model"
    assert request(stack.url, "GET", "/v1/models/gpt-4o").status == 404
    assert stack.endpoint.records == [], "nothing reached an endpoint"


def test_a_bad_models_setting_stops_the_function_at_init_naming_the_key() -> None:
    env = {"MODELS": json.dumps({"qwen-7b": {"endpoint": "llm-b", "upstream_formt": "tgi"}})}
    result = subprocess.run(
        [sys.executable, "-c", "import sagestream.app"],
        cwd=Path(__file__).resolve().parents[2],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "src", "AWS_REGION": "us-east-1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "MODELS: model 'qwen-7b': key 'upstream_formt' is not a setting" in result.stderr


@pytest.fixture(scope="module")
def multi() -> Iterator[Captured]:
    yield from _captured(MULTI)


def test_the_log_record_and_metrics_carry_the_model_and_the_request_id(multi: Captured) -> None:
    resp, lines = multi.call(body={"model": "qwen-7b", "messages": [{"role": "user", "content": "Hi"}], "stream": True})
    assert resp.status == 200
    (log,) = logs(lines)
    assert (log.data["model"], log.data["endpoint"]) == ("qwen-7b", "llm-b")
    assert log.data["function_request_id"] == resp.header("x-request-id")
    (blob,) = emf(lines, "OutputTokens")
    assert (blob.data["model"], blob.data["endpoint"]) == ("qwen-7b", "llm-b")
    assert ["endpoint", "dialect", "model", "service"] in blob.data["_aws"]["CloudWatchMetrics"][0]["Dimensions"]


# --- the request id -------------------------------------------------------------------------------------


def test_the_sdk_reads_the_request_id_of_streamed_whole_and_failed_answers(stack: LocalStack) -> None:
    client = sdk(stack, max_retries=0)
    message = [{"role": "user", "content": "Hi"}]
    whole = client.chat.completions.create(model="sagestream-sim", messages=message)
    assert whole._request_id
    raw = client.chat.completions.with_raw_response.create(model="sagestream-sim", messages=message, stream=True)
    streamed_id = raw.request_id
    list(raw.parse())
    with pytest.raises(openai.NotFoundError) as failed:
        client.chat.completions.create(model="other", messages=message)
    ids = {whole._request_id, streamed_id, failed.value.request_id}
    assert None not in ids and len(ids) == 3, "each answer its own invocation's id"


# --- the retry budget -----------------------------------------------------------------------------------


def test_one_sdk_call_under_throttling_reaches_the_endpoint_upstream_max_attempts_times(stack_for: GetStack) -> None:
    stack = stack_for(UPSTREAM_MAX_ATTEMPTS="3")
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="throttling")
    client = sdk(stack)  # the SDK's default: 2 retries of its own
    with pytest.raises(openai.RateLimitError) as throttled:
        client.chat.completions.create(
            model="sagestream-sim", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
    assert len(stack.endpoint.records) == 3, "UPSTREAM_MAX_ATTEMPTS calls, not 3 x 3"
    headers = throttled.value.response.headers
    assert (headers["x-should-retry"], headers["retry-after"], headers["retry-after-ms"]) == ("false", "1", "1000")


def test_a_5xx_after_the_budget_is_not_retried_by_the_sdk_either(stack_for: GetStack) -> None:
    stack = stack_for(UPSTREAM_MAX_ATTEMPTS="2")
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="http_503")
    with pytest.raises(openai.InternalServerError):
        sdk(stack).chat.completions.create(model="sagestream-sim", messages=[{"role": "user", "content": "Hi"}])
    assert len(stack.endpoint.records) == 2


NODE_THROTTLED = """
import OpenAI from "openai";
const baseURL = process.env.SAGESTREAM_URL;
if (!baseURL || !baseURL.startsWith("http://127.0.0.1:")) throw new Error(`not a loopback URL: ${baseURL}`);
const client = new OpenAI({ baseURL, apiKey: "unused" });
try {
  await client.chat.completions.create({ model: "sagestream-sim", messages: [{ role: "user", content: "Hi" }] });
  console.log(JSON.stringify({ ok: true }));
} catch (e) {
  console.log(JSON.stringify({ status: e.status, requestId: e.requestID ?? null }));
}
"""


def test_the_node_sdk_is_held_to_the_same_budget(stack_for: GetStack) -> None:
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        unavailable("tests/node/node_modules is missing: `make test` installs the openai npm package there")
    stack = stack_for(UPSTREAM_MAX_ATTEMPTS="3")
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="throttling")
    result = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_THROTTLED],
        cwd=NODE_DIR,
        env={"PATH": "/usr/bin:/bin", "SAGESTREAM_URL": f"{stack.url}/v1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome = json.loads(result.stdout)
    assert outcome["status"] == 429 and outcome["requestId"]
    assert len(stack.endpoint.records) == 3


def test_make_measure_prints_each_runs_request_id(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    from sagestream_local import measure

    assert measure.main([stack.url, "--runs", "2"]) == 0
    ids = re.findall(r"request id (\S+)", capsys.readouterr().out)
    assert len(ids) == 2 and len(set(ids)) == 2 and "-" not in ids
    (run,) = measure.measure(stack.url, runs=1)
    assert run.summary()["request_id"] == run.headers["x-request-id"]
