"""What a test does when a tool it drives is not installed: skip on a laptop, fail in CI.

`.ci/run` installs chromium, cargo and the cargo-lambda wheel; if one is missing there, a skip would hide
it and the suite would pass having run less than it claims.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it, so this is a broken install step)", pytrace=False)
    pytest.skip(reason)
