"""Fixtures of the protocol tests: real sockets on loopback, and the real botocore client."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials and a Region that sign requests for the loopback endpoints here, and nothing read from this
    machine's AWS configuration (nor its instance metadata)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIALOOPBACKTEST0000",
        "AWS_SECRET_ACCESS_KEY": "not-a-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
