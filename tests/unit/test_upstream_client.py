"""The one upstream client: what each call sends is made once, at init, and init loads only what it needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.awsrequest
import pytest

from sagestream import __version__, upstream
from sagestream.config import Config
from tests.fakes import response

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "AWS_ACCESS_KEY_ID": "AKIACLIENTTEST000000",
    "AWS_SECRET_ACCESS_KEY": "not-a-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    # Loopback and a port nobody listens on: the before-send hook answers, nothing leaves the host.
    "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": "http://127.0.0.1:9",
}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[botocore.awsrequest.AWSPreparedRequest]]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.13")
    client = upstream.make_client(Config(endpoint_name="llm"))
    requests: list[botocore.awsrequest.AWSPreparedRequest] = []

    def answer(request: botocore.awsrequest.AWSPreparedRequest, **_: Any) -> botocore.awsrequest.AWSResponse:
        requests.append(request)
        return response(200, b'{"generated_text": "hi"}')

    client.meta.events.register("before-send.sagemaker-runtime.*", answer)
    return client, requests


def test_every_call_sends_the_same_user_agent_made_at_init(sent: tuple[Any, list[Any]]) -> None:
    client, requests = sent
    for _ in range(2):
        assert upstream.invoke(client, Config(endpoint_name="llm"), b"{}") == b'{"generated_text": "hi"}'
    agents = {request.headers["User-Agent"].decode() for request in requests}
    (agent,) = agents
    # botocore's session form: SDK and version, Python, platform, Lambda's execution environment; and ours
    # (Powertools, once imported, appends its own part to every call's).
    assert agent.startswith("Botocore/") and " Python/" in agent
    assert f" exec-env/AWS_Lambda_python3.13 sagestream/{__version__}" in agent
    assert all(request.headers["Authorization"].startswith(b"AWS4-HMAC-SHA256 ") for request in requests)


# What init leaves unloaded: boto3 (botocore's client is made directly), Powertools' event classes, what only
# some settings use, and pydantic, which nothing of the function uses (the request models are msgspec's, and
# the chat request's load at init: the first request needs them).
NOT_AT_INIT = (
    "pydantic",
    "pydantic_core",
    "boto3",
    "s3transfer",
    "aws_lambda_powertools.utilities.data_classes",
    "aws_lambda_powertools.utilities.parameters",
    "aws_xray_sdk",
    "jwt",  # AUTH_MODE=jwt only, with cryptography
    "cryptography",
)


def _loaded_after(code: str, **env: str) -> list[str]:
    probe = f"import sys; {code}; print('loaded:', *(m for m in {NOT_AT_INIT!r} if m in sys.modules))"
    environ = {**os.environ, **ENV, "SAGEMAKER_ENDPOINT_NAME": "llm", **env}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    out = subprocess.run(
        [sys.executable, "-c", probe], env=environ, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    (line,) = [line for line in out.splitlines() if line.startswith("loaded:")]
    return line.split()[1:]


def test_init_imports_only_what_the_first_request_needs() -> None:
    assert _loaded_after("import sagestream.lambda_runtime, sagestream.app") == []


def test_the_request_models_are_ready_before_the_first_request() -> None:
    code = "import sagestream.app; assert {'sagestream.protocols.openai.request', 'msgspec'} <= set(sys.modules)"
    assert _loaded_after(code) == []


def test_no_request_of_any_protocol_loads_pydantic() -> None:
    messages = '{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}'
    responses = '{"model": "m", "input": "Hi", "text": {"format": {"type": "json_object"}}}'
    code = (
        "from sagestream.config import Config; from sagestream.protocols import MESSAGES, RESPONSES; "
        f"cfg = Config.from_env(); MESSAGES.parse({messages!r}.encode(), cfg); "
        f"RESPONSES.parse({responses!r}.encode(), cfg)"
    )
    assert "pydantic" not in _loaded_after(code, AUTH_MODE="none")
