"""Reliability tests share the end-to-end fixtures: session-cached local chains, reset for each test."""

from tests.e2e.conftest import _stacks, max_concurrency, stack, stack_for

__all__ = ["_stacks", "max_concurrency", "stack", "stack_for"]
