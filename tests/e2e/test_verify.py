"""``make verify`` against the local stack, with the runtime processes' output as the log source.

The checks run over real sockets against the real function; the disconnect check finds the aborted
invocation's log record in what the runtime processes printed, as it would in CloudWatch Logs
(tests/unit/test_verify_logs.py covers the CloudWatch Logs call itself, with moto).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sagestream_local import cors
from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack
from sagestream_local.verify import (
    FAIL,
    JS_SDK_HEADERS,
    PASS,
    UNKNOWN,
    LinesLogSource,
    LogsUnavailable,
    Target,
    check_bad_json,
    check_cors_preflight,
    check_disconnect,
    check_no_credentials,
    check_streaming,
    check_unknown_model,
    main,
    verify,
)
from tests.conftest import PYTHONPATH

KEY = "sk-verify-local"
ORIGIN = "http://localhost:5173"


@dataclass
class Output:
    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
            for text in pipe:
                with self.lock:
                    self.lines.append(text)

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.lines)


@dataclass
class Deployed:
    stack: LocalStack
    out: Output

    @property
    def target(self) -> Target:
        return Target(self.stack.url, api_key=KEY, timeout_s=30)

    @property
    def logs(self) -> LinesLogSource:
        return LinesLogSource(self.out.snapshot, "the local runtime processes' output")


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployed]:
    read_fd, write_fd = os.pipe()
    out = Output()
    reader = threading.Thread(target=out.read, args=(read_fd,), daemon=True)
    reader.start()
    stack = LocalStack(
        port=0,
        concurrency=2,
        timeout_s=60.0,
        env={
            "PYTHONPATH": PYTHONPATH,
            "UPSTREAM_READ_TIMEOUT_S": "2",
            "UPSTREAM_MAX_ATTEMPTS": "1",
            "API_KEYS": KEY,
            "ALLOWED_ORIGINS": ORIGIN,
        },
        # Tokens 20 ms apart: the streaming check can tell one-by-one from bursts.
        scenario=Scenario(dialect="openai", ttft_ms=5, cadence_ms=20, tokens=30, non_ascii=0.0),
        upstream="simulated",
        stdout=write_fd,
    ).start()
    try:
        yield Deployed(stack, out)
    finally:
        stack.stop()
        os.close(write_fd)
        reader.join(5)


def test_streaming_passes_with_the_measured_numbers(deployed: Deployed) -> None:
    check = check_streaming(deployed.target)
    assert check.status == PASS, check.evidence
    assert check.data["deltas"] == 30 and check.data["done"] is True
    assert check.data["ttft_ms"] > 0 and check.data["cadence_ms_median"] > 5
    assert "30 deltas" in check.evidence


def test_bad_json_and_unknown_model_are_openai_errors_with_their_status(deployed: Deployed) -> None:
    bad = check_bad_json(deployed.target)
    assert bad.status == PASS and bad.data["status"] == 400, bad.evidence
    unknown = check_unknown_model(deployed.target)
    assert unknown.status == PASS and unknown.data["status"] == 404, unknown.evidence
    assert unknown.data["error"]["code"] == "model_not_found"


def test_no_credentials_is_refused_and_unknown_when_none_were_given(deployed: Deployed) -> None:
    check = check_no_credentials(deployed.target)
    assert check.status == PASS and check.data["status"] == 401, check.evidence
    anonymous = check_no_credentials(Target(deployed.stack.url))
    assert anonymous.status == UNKNOWN and "no credentials were given" in anonymous.evidence


def test_a_wrong_key_where_one_is_needed_fails_the_stream_check(deployed: Deployed) -> None:
    check = check_streaming(Target(deployed.stack.url, api_key="sk-wrong", timeout_s=30))
    assert check.status == FAIL and "HTTP 401" in check.evidence


def test_cors_preflight_answers_for_the_js_sdk_headers_as_the_template_allows(deployed: Deployed) -> None:
    check = check_cors_preflight(deployed.target, ORIGIN)
    missing = [h for h in JS_SDK_HEADERS if h not in cors.ALLOW_HEADERS]
    assert check.data["allow_origin"] == ORIGIN and check.data["missing"] == missing
    # The template (and the local front, which copies it) must allow every header the SDK sends.
    assert check.status == (FAIL if missing else PASS), check.evidence
    elsewhere = check_cors_preflight(deployed.target, "https://elsewhere.example")
    assert elsewhere.status == FAIL and "Access-Control-Allow-Origin None" in elsewhere.evidence
    assert check_cors_preflight(deployed.target, None).status == UNKNOWN


def test_the_disconnect_check_finds_the_record_and_sees_the_client_leave(deployed: Deployed) -> None:
    assert deployed.stack.endpoint is not None
    deployed.stack.endpoint.set_scenario(tokens=400, cadence_ms=20)
    try:
        # The aborted stream's own x-request-id is what finds its record.
        check = check_disconnect(deployed.target, deployed.logs, wait_s=10)
    finally:
        deployed.stack.endpoint.reset_scenario()
    assert check.status == PASS, check.evidence
    assert check.data["deltas_read"] == 3 and check.data["client_disconnected"] is True
    # 400 tokens 20 ms apart would take 8 s; the function stopped within a few.
    assert check.data["tokens_after"] < 50, check.data


def test_the_disconnect_check_says_unknown_and_why(deployed: Deployed) -> None:
    no_logs = check_disconnect(deployed.target, None, request_id_of=lambda run: "some-id")
    assert no_logs.status == UNKNOWN and "no LOG_GROUP given" in no_logs.evidence
    no_id = check_disconnect(deployed.target, deployed.logs, request_id_of=lambda run: None)
    assert no_id.status == UNKNOWN and "no x-request-id" in no_id.evidence
    never = check_disconnect(deployed.target, deployed.logs, wait_s=0.2, request_id_of=lambda run: "no-such-id")
    assert never.status == UNKNOWN and "no log record for request no-such-id" in never.evidence

    class NoCredentials:
        description = "CloudWatch Logs group /aws/lambda/x"

        def find(self, request_id: str, since_ms: int, wait_s: float) -> None:
            raise LogsUnavailable("Unable to locate credentials")

    unreadable = check_disconnect(deployed.target, NoCredentials(), request_id_of=lambda run: "some-id")
    assert unreadable.status == UNKNOWN and "Unable to locate credentials" in unreadable.evidence


def test_the_command_prints_a_table_and_json_and_exits_non_zero_on_a_fail(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([deployed.stack.url, "--api-key", KEY, "--json", "--log-wait", "1"])
    report = json.loads(capsys.readouterr().out)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert set(statuses) == {"streaming", "bad_json", "unknown_model", "no_credentials", "cors_preflight", "disconnect"}
    assert statuses["streaming"] == statuses["bad_json"] == statuses["unknown_model"] == PASS
    assert statuses["cors_preflight"] == UNKNOWN  # no --origin
    assert statuses["disconnect"] == UNKNOWN  # no --log-group (and, before x-request-id, no id either)
    assert code == (1 if FAIL in statuses.values() else 0)
    main([deployed.stack.url, "--api-key", KEY, "--origin", ORIGIN, "--log-wait", "1"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["CHECK", "RESULT", "EVIDENCE"]
    assert any(line.startswith("cors_preflight") for line in printed)


# --- a deployment with several models, and one asked without its key ---


@pytest.fixture(scope="module")
def several_models() -> Iterator[LocalStack]:
    # Two endpoint names on the one simulated endpoint: its records say which model a request named.
    models = {"alpha": {"endpoint": "sim-alpha"}, "beta": {"endpoint": "sim-beta"}}
    stack = LocalStack(
        port=0,
        concurrency=2,
        timeout_s=60.0,
        env={
            "PYTHONPATH": PYTHONPATH,
            "UPSTREAM_READ_TIMEOUT_S": "2",
            "UPSTREAM_MAX_ATTEMPTS": "1",
            "API_KEYS": KEY,
            "MODELS": json.dumps(models),
        },
        scenario=Scenario(dialect="openai", ttft_ms=5, cadence_ms=20, tokens=30, non_ascii=0.0),
        upstream="simulated",
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


def test_on_several_models_the_checks_send_the_first_listed_or_the_one_given(several_models: LocalStack) -> None:
    endpoint = several_models.endpoint
    assert endpoint is not None
    endpoint.clear_records()
    checks = {c.name: c for c in verify(Target(several_models.url, api_key=KEY, timeout_s=30))}
    assert checks["streaming"].status == PASS, checks["streaming"].evidence
    assert checks["bad_json"].status == checks["unknown_model"].status == PASS
    assert {r.endpoint for r in endpoint.records} == {"sim-alpha"}  # the first of /v1/models
    endpoint.clear_records()
    assert main([several_models.url, "--api-key", KEY, "--model", "beta", "--log-wait", "1"]) == 0
    assert {r.endpoint for r in endpoint.records} == {"sim-beta"}


def test_without_a_key_a_keyed_deployment_is_unknown_needs_a_key_not_a_fail(several_models: LocalStack) -> None:
    checks = {c.name: c for c in verify(Target(several_models.url, timeout_s=30))}
    for name in ("streaming", "bad_json", "unknown_model", "disconnect"):
        assert checks[name].status == UNKNOWN and "needs a key" in checks[name].evidence, checks[name]
    assert FAIL not in {c.status for c in checks.values()}


# --- a REST front (Front=RestApi): make verify with the key as x-api-key -------------------------------------


@pytest.fixture(scope="module")
def rest_front() -> Iterator[Deployed]:
    read_fd, write_fd = os.pipe()
    out = Output()
    reader = threading.Thread(target=out.read, args=(read_fd,), daemon=True)
    reader.start()
    stack = LocalStack(
        port=0,
        concurrency=2,
        timeout_s=60.0,
        env={"PYTHONPATH": PYTHONPATH, "UPSTREAM_READ_TIMEOUT_S": "2", "UPSTREAM_MAX_ATTEMPTS": "1", "API_KEYS": KEY},
        scenario=Scenario(dialect="openai", ttft_ms=5, cadence_ms=20, tokens=30, non_ascii=0.0),
        upstream="simulated",
        stdout=write_fd,
        front="rest",
        throttle_rate=100.0,
        throttle_burst=100,
    ).start()
    try:
        yield Deployed(stack, out)
    finally:
        stack.stop()
        os.close(write_fd)
        reader.join(5)


def test_make_verify_checks_a_rest_front_as_it_checks_a_url(rest_front: Deployed) -> None:
    checks = {c.name: c for c in verify(rest_front.target, logs=rest_front.logs, wait_s=10)}
    for name in ("streaming", "bad_json", "unknown_model", "no_credentials", "disconnect"):
        assert checks[name].status == PASS, (name, checks[name].evidence)
    assert checks["no_credentials"].data["status"] == 403  # API Gateway's own refusal, before the function
    wrong = check_streaming(Target(rest_front.stack.url, api_key="sk-wrong", timeout_s=30))
    assert wrong.status == FAIL and "HTTP 403" in wrong.evidence
