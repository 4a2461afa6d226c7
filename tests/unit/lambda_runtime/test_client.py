"""The Runtime API client's values without a socket (tests/protocol/test_runtime.py calls a real Runtime API)."""

from __future__ import annotations

import pytest

from sagestream.lambda_runtime.client import RuntimeAPIClient, deadline_from_header, parse_address


@pytest.mark.parametrize("address", ["127.0.0.1", "https://127.0.0.1:9000/", "ftp://127.0.0.1:21"])
def test_an_address_without_a_port_or_over_another_scheme_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="AWS_LAMBDA_RUNTIME_API"):
        parse_address(address)


def test_every_path_takes_the_api_version_after_the_emulators_prefix() -> None:
    client = RuntimeAPIClient("http://127.0.0.1:9000/.rt/fn/")
    assert client.path("invocation/next") == "/.rt/fn/2018-06-01/runtime/invocation/next"
    assert RuntimeAPIClient("127.0.0.1:9001").path("init/error") == "/2018-06-01/runtime/init/error"


def test_a_missing_deadline_is_now_and_said_to_be_a_duration() -> None:
    assert deadline_from_header(None, now_ms=1_700_000_000_000) == (1_700_000_000_000, True)
