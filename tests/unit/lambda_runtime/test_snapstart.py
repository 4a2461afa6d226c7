"""SnapStart's sequence with a stand-in Runtime API client (tests/e2e/test_snapstart.py runs it for real)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import snapshot_restore_py

from sagestream.lambda_runtime import snapstart


class _Client:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def restore_next(self) -> None:
        self.calls.append("restore_next")

    def post_init_error(self, exc: BaseException, error_type: str) -> int:
        self.calls.append(error_type)
        return 202

    def post_restore_error(self, exc: BaseException) -> int:
        self.calls.append(snapstart.RESTORE_ERROR)
        return 202


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[Any], list[Any]]]:
    before: list[Any] = []
    after: list[Any] = []
    monkeypatch.setattr(snapshot_restore_py, "get_before_snapshot", lambda: before)
    monkeypatch.setattr(snapshot_restore_py, "get_after_restore", lambda: after)
    yield before, after


def test_before_hooks_run_last_registered_first_and_after_hooks_in_order(hooks: tuple[list[Any], list[Any]]) -> None:
    before, after = hooks
    ran: list[str] = []
    before += [(ran.append, ("b1",), {}), (ran.append, ("b2",), {})]
    after += [(ran.append, ("a1",), {}), (ran.append, ("a2",), {})]
    client = _Client()
    assert snapstart.snapshot_and_restore(client) is True  # type: ignore[arg-type]
    assert ran == ["b2", "b1", "a1", "a2"] and client.calls == ["restore_next"]


def test_a_failing_hook_is_reported_with_its_phases_error_type(hooks: tuple[list[Any], list[Any]]) -> None:
    before, after = hooks

    def fails() -> None:
        raise RuntimeError("no")

    before.append((fails, (), {}))
    client = _Client()
    assert snapstart.snapshot_and_restore(client) is False  # type: ignore[arg-type]
    assert client.calls == [snapstart.SNAPSHOT_ERROR]  # never waited for a restore
    before.clear()
    after.append((fails, (), {}))
    client = _Client()
    assert snapstart.snapshot_and_restore(client) is False  # type: ignore[arg-type]
    assert client.calls == ["restore_next", snapstart.RESTORE_ERROR]
