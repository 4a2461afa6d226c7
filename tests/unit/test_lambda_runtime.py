"""The runtime package's face: what a handler imports from it (tests/protocol/test_runtime.py runs the runtime
against a Runtime API; tests/unit/lambda_runtime holds each module's own tests)."""

from __future__ import annotations

import subprocess
import sys

import sagestream.lambda_runtime as lambda_runtime
from sagestream.lambda_runtime import interface, loop, stream


def test_the_package_face_is_the_modules_own_objects() -> None:
    # A handler catches the very class the stream raises: the face re-exports, it never copies.
    assert lambda_runtime.ClientDisconnected is interface.ClientDisconnected
    assert lambda_runtime.StreamingResponse is stream.StreamingResponse and lambda_runtime.main is loop.main
    assert all(hasattr(lambda_runtime, name) for name in lambda_runtime.__all__)


def test_the_entry_point_runs_the_loop_and_reports_a_missing_runtime_api() -> None:
    # `python -m sagestream.lambda_runtime` is what the exec wrapper runs; with no Runtime API it cannot start.
    ran = subprocess.run(
        [sys.executable, "-m", "sagestream.lambda_runtime"], env={}, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode != 0 and "AWS_LAMBDA_RUNTIME_API" in ran.stderr
