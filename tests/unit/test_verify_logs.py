"""``make verify``'s CloudWatch Logs lookup, against moto's CloudWatch Logs."""

from __future__ import annotations

import json
import time

import boto3
import pytest
from moto import mock_aws

from sagestream_local.verify import CloudWatchLogs, LogsUnavailable

GROUP = "/aws/lambda/sagestream-dev"


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("logs", region_name="eu-west-1")
        client.create_log_group(logGroupName=GROUP)
        client.create_log_stream(logGroupName=GROUP, logStreamName="2026/12/03/[$LATEST]abc")
        yield client


def _put(client, *messages: str) -> None:  # type: ignore[no-untyped-def]
    now = int(time.time() * 1000)
    client.put_log_events(
        logGroupName=GROUP,
        logStreamName="2026/12/03/[$LATEST]abc",
        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)],
    )


def test_finds_the_invocation_record_of_a_request_id_among_others(logs) -> None:  # type: ignore[no-untyped-def]
    mine = {"message": "invocation", "function_request_id": "req-2", "client_disconnected": True, "output_tokens": 5}
    _put(
        logs,
        json.dumps({"message": "invocation", "function_request_id": "req-1", "client_disconnected": False}),
        "START RequestId: req-2 Version: $LATEST",
        json.dumps({"message": "the request failed", "function_request_id": "req-2"}),
        json.dumps(mine),
        "REPORT RequestId: req-2 Duration: 12.3 ms",
    )
    record = CloudWatchLogs(GROUP, "eu-west-1").find("req-2", int(time.time() * 1000), wait_s=0)
    assert record == mine


def test_a_record_matched_by_the_function_urls_request_id_and_a_prefixed_line(logs) -> None:  # type: ignore[no-untyped-def]
    line = {"message": "invocation", "function_request_id": "fn-1", "url_request_id": "url-9", "output_tokens": 40}
    _put(logs, "2026-12-03T08:00:00.000Z\tfn-1\t" + json.dumps(line))
    assert CloudWatchLogs(GROUP, "eu-west-1").find("url-9", int(time.time() * 1000), wait_s=0) == line


def test_no_record_within_the_wait_is_none(logs) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    assert CloudWatchLogs(GROUP, "eu-west-1").find("absent", int(time.time() * 1000), wait_s=0) is None
    assert time.monotonic() - started < 5


def test_a_missing_group_is_unavailable_with_aws_own_words(logs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LogsUnavailable, match="ResourceNotFoundException"):
        CloudWatchLogs("/aws/lambda/nope", "eu-west-1").find("x", 0, wait_s=0)


def test_no_credentials_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(LogsUnavailable, match="credentials"):
        CloudWatchLogs(GROUP, "eu-west-1").find("x", 0, wait_s=0)
