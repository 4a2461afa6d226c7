"""The soak in short: 200 sequential invocations through one runtime process leave its fds, threads and RSS
flat (``make soak`` runs 2,000; the bounds are in tests/reliability/soak.py)."""

from __future__ import annotations

from tests.reliability.soak import soak


def test_two_hundred_invocations_leave_the_runtime_process_flat() -> None:
    result = soak(invocations=200, warmup=40)
    print(f"\n{result}")
    assert result.pid_unchanged, "the runtime process exited or was replaced"
    assert result.end.fds == result.start.fds, result
    assert result.end.threads == result.start.threads, result
    assert result.flat, result
