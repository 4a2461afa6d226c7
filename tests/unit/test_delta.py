"""The one predicate every encoder's fast path asks: a delta that is text and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from sagestream.delta import Delta, Usage, is_text_only


def test_text_alone_or_with_usage_is_text_only() -> None:
    assert is_text_only(Delta("Hi")) and is_text_only(Delta("Hi", usage=Usage(1, 1, 2)))


@pytest.mark.parametrize(
    "more",
    [
        {"finish_reason": "stop"},
        {"tool_calls": [{"index": 0}]},
        {"reasoning_content": "r"},
        {"reasoning": "r"},
        {"refusal": "no"},
        {"logprobs": {"content": []}},
        {"extra": {"stop_reason": None, "token_ids": [7]}},
    ],
    ids=lambda more: next(iter(more)),
)
def test_any_other_field_sends_the_delta_down_the_general_path(more: dict[str, Any]) -> None:
    assert not is_text_only(Delta("Hi", **more))


def test_a_delta_without_text_is_not_text_only_and_an_empty_one_says_so() -> None:
    assert not is_text_only(Delta(role="assistant"))
    assert Delta().is_empty and not Delta(role="assistant").is_empty
