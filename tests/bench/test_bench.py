"""The benchmark harness and ``make measure`` stay working: quick runs against a real LocalStack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.peers import main as peer_main

from bench import report
from sagestream_local import measure
from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(port=0, concurrency=1, scenario=Scenario(ttft_ms=40, cadence_ms=5, tokens=12)) as s:
        yield s


def test_measure_times_every_delta_of_a_local_stream(stack: LocalStack) -> None:
    runs = measure.measure(stack.url, runs=2, timeout_s=30)
    assert [r.status for r in runs] == [200, 200]
    for run in runs:
        assert run.deltas == 12 and run.done and run.error is None
        assert run.ttft_ms is not None and run.ttft_ms >= 40
        assert len(run.arrivals_ns) == 12 and list(run.arrivals_ns) == sorted(run.arrivals_ns)
        assert run.text.startswith("You asked about")


def test_measure_cli_prints_json_and_fails_on_http_errors(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert measure.main([stack.url, "--runs", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][0]["deltas"] == 12 and doc["runs"][0]["burst_gaps"] >= 0
    assert measure.main([stack.url, "--runs", "1", "--path", "/nowhere"]) == 1
    assert "HTTP 404" in capsys.readouterr().out


def test_measure_signs_for_lambda_with_the_callers_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAMEASURETEST00000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    url = "https://abc123.lambda-url.eu-west-1.on.aws/v1/chat/completions"
    headers = measure.signed_headers(url, b"{}", {"Host": "abc123.lambda-url.eu-west-1.on.aws"})
    assert "/eu-west-1/lambda/aws4_request" in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] == "token" and headers["X-Amz-Date"]
    # Front=RestApi with AuthMode iam: the REST API's AWS_IAM wants execute-api signatures, its region from the host.
    rest = "https://a1b2c3d4e5.execute-api.us-west-2.amazonaws.com/prod/v1/chat/completions"
    headers = measure.signed_headers(rest, b"{}", {"Host": "a1b2c3d4e5.execute-api.us-west-2.amazonaws.com"})
    assert "/us-west-2/execute-api/aws4_request" in headers["Authorization"]


def test_a_key_goes_as_a_bearer_token_and_as_x_api_key_so_it_fits_either_front() -> None:
    assert measure.key_headers("sk-1") == {"Authorization": "Bearer sk-1", "x-api-key": "sk-1"}
    assert measure.key_headers(None) == {}


def test_stream_reader_counts_deltas_however_the_bytes_are_cut() -> None:
    body = b"".join(
        b"data: " + json.dumps({"choices": [{"delta": {"content": c}}]}).encode() + b"\n\n" for c in ["a", "é", "c"]
    )
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"
    reader = measure.StreamReader()
    total = sum(reader.feed(wire[i : i + 3]) for i in range(0, len(wire), 3))
    assert (total, "".join(reader.text), reader.complete) == (3, "aéc", True)


@pytest.mark.parametrize("peer", ["sagestream", "httpx-chunk-1024", "line-iterator"])
def test_a_peer_reports_one_arrival_per_token(
    stack: LocalStack, peer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert stack.endpoint is not None
    stack.endpoint.clear_records()
    out = tmp_path / "peer.json"
    target = stack.url if peer == "sagestream" else stack.endpoint.url
    for name, value in stack.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    assert peer_main([peer, "--target", target, "--runs", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    metrics = report.metrics(result, stack.endpoint.records)
    assert metrics["deltas"] == metrics["tokens_sent"] == 12
    assert metrics["added_ms_p50"] is not None and metrics["added_ms_p50"] >= 0


def test_quick_bench_writes_its_report(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--out",
            str(tmp_path),
            "--workloads",
            "tinyllama-like",
            "--peers",
            "sagestream,buffered,httpx-chunk-1024",
        ],
        cwd=ROOT,
        check=True,
        timeout=110,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
    )
    doc = json.loads((tmp_path / "latest.json").read_text())
    assert set(doc) >= {"peers", "workloads", "machine"}
    assert set(doc["peers"]) == {"sagestream", "buffered", "httpx-chunk-1024"}
    assert doc["peers"]["sagestream"]["deltas"] == 160  # burst gaps are a target, not an assertion: noisy host
    assert doc["peers"]["buffered"]["burst_gaps"] > 100  # the whole answer at once
    assert "| `sagestream` |" in (tmp_path / "latest.md").read_text()
    # The Messages encoder beside the chat encoder, same deltas, same run: a ratio and its target row.
    encoders = doc["encoders"]
    assert encoders["deltas"] == 2002 and encoders["chat_us_per_delta"] > 0
    ratio = encoders["messages_us_per_delta"] / encoders["chat_us_per_delta"]
    assert abs(encoders["messages_vs_chat"] - ratio) < 0.01  # each figure is rounded to 3 places
    assert "Messages encoder CPU per delta <= 1.10x chat's" in doc["targets"]
    assert (tmp_path / "timeline.png").stat().st_size > 1000
