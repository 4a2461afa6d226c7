"""SnapStart's restore sequence in the runtime, against the local Runtime API's emulation of it (init, then the
snapshot at ``/restore/next``, then a restore when an invocation needs the environment): the hooks run in
Lambda's order around the wait, nothing is served before the restore, ``random`` is reseeded, and a hook
that fails is reported where Lambda expects it."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from tests.client import request

from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import ExecutionEnvironment

Start = Callable[..., FunctionURL]
SNAP_START = {"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def start(local_function: Start, log: Path, **env: str) -> tuple[FunctionURL, ExecutionEnvironment]:
    front = local_function(
        "tests.handlers.snapstart_state", size=1, env={**SNAP_START, "TEST_SNAPSTART_LOG": str(log), **env}
    )
    return front, front.pool.environments[0]


def test_the_hooks_run_around_the_snapshot_and_nothing_is_served_before_the_restore(
    local_function: Start, tmp_path: Path
) -> None:
    log = tmp_path / "hooks"
    front, environment = start(local_function, log)
    assert wait_for(lambda: environment.snapshots == 1), "init never reached /restore/next"
    time.sleep(0.3)  # a runtime that went on to /next now would be seen below
    assert environment.restores == 0 and log.read_text().split() == ["before-2", "before-1"]
    resp = request(front.url, "POST", "/", b"{}")
    assert resp.status == 200, resp.body
    answer = json.loads(resp.body)
    # Before-snapshot hooks last-registered first, after-restore hooks in their order, as Lambda runs them.
    assert answer["noted"] == ["before-2", "before-1", "after-1", "after-2"]
    assert answer["random"] != random.Random(42).random(), "the snapshot's random state was not reseeded"
    assert environment.restores == 1 and request(front.url, "POST", "/", b"{}").status == 200


def test_a_failing_after_restore_hook_is_a_restore_error_and_the_environment_serves_nothing(
    local_function: Start, tmp_path: Path
) -> None:
    front, environment = start(local_function, tmp_path / "hooks", TEST_SNAPSTART_FAIL="after-1")
    assert wait_for(lambda: environment.snapshots == 1)
    resp = request(front.url, "POST", "/", b"{}")
    assert resp.status >= 500
    assert wait_for(lambda: environment.last_init_error is not None or environment.init_errors > 1)
    assert environment.exit_codes and environment.exit_codes[0] == 1
    error = environment.last_init_error or {}
    assert error.get("errorType") == "Runtime.AfterRestoreError" and "after-1 hook failed" in str(error)


def test_a_failing_before_snapshot_hook_is_an_init_error_and_no_snapshot_is_taken(
    local_function: Start, tmp_path: Path
) -> None:
    _, environment = start(local_function, tmp_path / "hooks", TEST_SNAPSTART_FAIL="before-1")
    assert wait_for(lambda: environment.last_init_error is not None)
    assert environment.last_init_error is not None
    assert environment.last_init_error["errorType"] == "Runtime.BeforeSnapshotError"
    assert environment.snapshots == 0


def test_without_snapstart_no_hook_runs(local_function: Start, tmp_path: Path) -> None:
    log = tmp_path / "hooks"
    log.write_text("")
    front = local_function("tests.handlers.snapstart_state", size=1, env={"TEST_SNAPSTART_LOG": str(log)})
    answer = json.loads(request(front.url, "POST", "/", b"{}").body)
    assert answer["noted"] == [] and answer["random"] == random.Random(42).random()
    assert front.pool.environments[0].snapshots == 0
