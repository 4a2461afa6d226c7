"""The runnable examples in the pure modules' docstrings run and show what they claim."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from sagestream import dialects, lines, prompts, schema, sse


@pytest.mark.parametrize("module", [lines, dialects, prompts, schema, sse], ids=lambda m: m.__name__)
def test_docstring_examples_hold(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
