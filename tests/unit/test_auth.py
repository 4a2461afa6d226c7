"""Access control: which routes need a key, where the keys come from (SSM, Secrets Manager: moto, in-process),
how a key is presented and compared, and what a caller without a good one gets."""

from __future__ import annotations

import doctest
import hmac
import json
import logging
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from sagestream import auth
from sagestream.auth import Authenticator, parse_keys, presented_keys, requires_key, store_of
from sagestream.config import Config, ConfigError
from sagestream.errors import APIError

# Obviously fake keys, made up for these tests.
KEY_A = "sk-test-aaaaaaaaaaaaaaaa"
KEY_B = "sk-test-bbbbbbbbbbbbbbbb"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-process AWS: no network, stand-in credentials, one region."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with mock_aws():
        yield


def api_key_config(parameter: str | None = None, *, local: tuple[str, ...] = (), max_age: int = 300) -> Config:
    return Config(
        endpoint_name="llm",
        auth_mode="api_key",
        api_keys_parameter=parameter,
        api_keys=local,
        api_keys_max_age_s=max_age,
    )


def refused(authenticator: Authenticator, headers: dict[str, str]) -> APIError:
    with pytest.raises(APIError) as caught:
        authenticator.check(headers)
    return caught.value


# --- which routes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/x", "/v1"])
def test_the_openai_routes_need_a_key(path: str) -> None:
    assert requires_key(path)


@pytest.mark.parametrize("path", ["/health", "/", "/index.html", "/v1x", "/favicon.ico"])
def test_health_and_the_page_do_not(path: str) -> None:
    assert not requires_key(path)


# --- how a key is presented -------------------------------------------------------------------------------


def test_a_key_comes_as_a_bearer_token_or_as_x_api_key() -> None:
    assert presented_keys({"authorization": f"Bearer {KEY_A}"}) == [KEY_A]
    assert presented_keys({"authorization": f"bearer   {KEY_A} "}) == [KEY_A]
    assert presented_keys({"x-api-key": KEY_B}) == [KEY_B]
    assert presented_keys({"authorization": f"Bearer {KEY_A}", "x-api-key": KEY_B}) == [KEY_A, KEY_B]
    assert presented_keys({"authorization": f"Basic {KEY_A}"}) == []
    assert presented_keys({"authorization": "Bearer "}) == []
    assert presented_keys({}) == []


def test_missing_and_wrong_keys_are_401_in_the_openai_shape() -> None:
    authenticator = Authenticator(api_key_config(local=(KEY_A,)))
    for headers in ({}, {"authorization": "Bearer sk-test-wrong"}, {"x-api-key": KEY_A[:-1]}, {"x-api-key": ""}):
        err = refused(authenticator, headers)
        assert err.status == 401
        assert err.body()["error"]["type"] == "authentication_error"
        assert err.body()["error"]["code"] == "invalid_api_key"
        assert err.headers == {"WWW-Authenticate": "Bearer"}
    authenticator.check({"authorization": f"Bearer {KEY_A}"})
    authenticator.check({"x-api-key": KEY_A})


def test_behind_a_rest_front_the_gateways_key_check_is_trusted_but_a_request_without_a_key_is_not() -> None:
    # API Gateway compared x-api-key with its own keys (a wrong one never reaches the function); it passes
    # the header on, so a request without one came some other way.
    authenticator = Authenticator(Config(endpoint_name="llm", auth_mode="api_key", api_key_source="gateway"))
    assert authenticator.check({"x-api-key": "any-key-api-gateway-accepted"}, "k3y1d") is None
    for headers in ({}, {"x-api-key": " "}, {"authorization": f"Bearer {KEY_A}"}):
        err = refused(authenticator, headers)
        assert err.status == 401 and "x-api-key" in err.message
    # A key but no id of the key API Gateway checked: the event did not come through its check.
    with pytest.raises(APIError) as info:
        authenticator.check({"x-api-key": "any-key"}, None)
    assert info.value.status == 401
    # The same setting means nothing in the other modes.
    Authenticator(Config(endpoint_name="llm", auth_mode="iam", api_key_source="gateway")).check({})


def test_every_key_is_compared_in_constant_time_none_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    authenticator = Authenticator(api_key_config(local=(KEY_A, KEY_B, "sk-test-cccccccccccccccc")))
    authenticator.check({"x-api-key": KEY_A})  # matches the first key, and still looks at the other two
    assert len(calls) == 3
    calls.clear()
    refused(authenticator, {"authorization": "Bearer sk-test-short", "x-api-key": "sk-test-" + "z" * 64})
    assert len(calls) == 6
    assert {len(a) for a, _ in calls} == {32}, "digests are compared, so a key's length does not show"


def test_iam_and_none_modes_check_nothing(caplog: pytest.LogCaptureFixture) -> None:
    Authenticator(Config(endpoint_name="llm", auth_mode="iam")).check({})
    with caplog.at_level(logging.WARNING, logger="sagestream.auth"):
        open_ = Authenticator(Config(endpoint_name="llm", auth_mode="none"))
    open_.check({})
    assert any("AUTH_MODE=none" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


# --- the value of a parameter or secret ---------------------------------------------------------------------


def test_key_lists_are_json_lists_objects_or_separated_text() -> None:
    assert parse_keys(json.dumps([KEY_A, KEY_B])) == (KEY_A, KEY_B)
    assert parse_keys(json.dumps({"alice": KEY_A, "ci": KEY_B})) == (KEY_A, KEY_B)
    assert parse_keys(f"{KEY_A},{KEY_B}") == (KEY_A, KEY_B)
    assert parse_keys(f" {KEY_A}\n{KEY_B}\n") == (KEY_A, KEY_B)
    assert parse_keys(KEY_A.encode()) == (KEY_A,)
    assert parse_keys("") == () and parse_keys(None) == ()


def test_which_store_a_parameter_names() -> None:
    assert store_of("/sagestream/prod/api-keys") == (None, "/sagestream/prod/api-keys")
    assert store_of("ssm:/sagestream/keys") == ("ssm", "/sagestream/keys")
    assert store_of("secretsmanager:sagestream/keys") == ("secretsmanager", "sagestream/keys")
    sm_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:sagestream-keys-AbCdEf"
    assert store_of(sm_arn) == ("secretsmanager", sm_arn)
    ssm_arn = "arn:aws:ssm:us-east-1:123456789012:parameter/sagestream/keys"
    assert store_of(ssm_arn) == ("ssm", ssm_arn)


# --- SSM and Secrets Manager, through Powertools Parameters (moto) --------------------------------------------


def test_keys_from_an_ssm_securestring(aws: None) -> None:
    boto3.client("ssm").put_parameter(
        Name="/sagestream/test/api-keys", Value=json.dumps([KEY_A, KEY_B]), Type="SecureString"
    )
    authenticator = Authenticator(api_key_config("/sagestream/test/api-keys"))
    authenticator.check({"authorization": f"Bearer {KEY_A}"})
    authenticator.check({"x-api-key": KEY_B})
    assert refused(authenticator, {"x-api-key": "sk-test-nope"}).status == 401


def test_ssm_keys_are_cached_for_max_age(aws: None) -> None:
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name="/sagestream/test/keys", Value=KEY_A, Type="SecureString")
    cached = Authenticator(api_key_config("/sagestream/test/keys", max_age=300))
    fresh = Authenticator(api_key_config("/sagestream/test/keys", max_age=0))
    cached.check({"x-api-key": KEY_A})
    fresh.check({"x-api-key": KEY_A})
    ssm.put_parameter(Name="/sagestream/test/keys", Value=KEY_B, Type="SecureString", Overwrite=True)
    cached.check({"x-api-key": KEY_A})  # the old list, until max_age has passed
    assert refused(cached, {"x-api-key": KEY_B}).status == 401
    fresh.check({"x-api-key": KEY_B})  # max_age 0: read again
    assert refused(fresh, {"x-api-key": KEY_A}).status == 401


def test_keys_from_a_secrets_manager_secret(aws: None) -> None:
    boto3.client("secretsmanager").create_secret(
        Name="sagestream/test/api-keys", SecretString=json.dumps({"alice": KEY_A, "ci": KEY_B})
    )
    authenticator = Authenticator(api_key_config("secretsmanager:sagestream/test/api-keys"))
    authenticator.check({"authorization": f"Bearer {KEY_A}"})
    authenticator.check({"x-api-key": KEY_B})
    assert refused(authenticator, {"x-api-key": "sk-test-nope"}).status == 401


def test_a_secret_by_its_arn(aws: None) -> None:
    arn = boto3.client("secretsmanager").create_secret(Name="sagestream-keys", SecretString=KEY_A)["ARN"]
    Authenticator(api_key_config(arn)).check({"x-api-key": KEY_A})


def test_a_bare_name_that_ssm_does_not_have_is_looked_up_in_secrets_manager(aws: None) -> None:
    boto3.client("secretsmanager").create_secret(Name="sagestream/test/keys", SecretString=f"{KEY_A},{KEY_B}")
    authenticator = Authenticator(api_key_config("sagestream/test/keys"))
    authenticator.check({"x-api-key": KEY_B})
    assert authenticator._store == "secretsmanager", "the store that answered is remembered"
    authenticator.check({"x-api-key": KEY_A})


def test_local_keys_and_stored_keys_both_count(aws: None) -> None:
    boto3.client("ssm").put_parameter(Name="/sagestream/test/keys", Value=KEY_A, Type="SecureString")
    authenticator = Authenticator(api_key_config("/sagestream/test/keys", local=(KEY_B,)))
    authenticator.check({"x-api-key": KEY_A})
    authenticator.check({"x-api-key": KEY_B})


def test_keys_that_cannot_be_read_are_a_500_not_a_401(aws: None, caplog: pytest.LogCaptureFixture) -> None:
    authenticator = Authenticator(api_key_config("/sagestream/test/missing"))
    with caplog.at_level(logging.ERROR, logger="sagestream.auth"):
        err = refused(authenticator, {"x-api-key": KEY_A})
    assert err.status == 500 and err.body()["error"]["type"] == "server_error"
    assert "sagestream/test/missing" in caplog.text
    assert KEY_A not in caplog.text, "a presented key is never logged"
    # Created later: the next request reads it (failures are not cached).
    boto3.client("ssm").put_parameter(Name="/sagestream/test/missing", Value=KEY_A, Type="SecureString")
    authenticator.check({"x-api-key": KEY_A})


def test_a_request_without_a_key_does_not_read_the_store(aws: None) -> None:
    authenticator = Authenticator(api_key_config("/sagestream/test/none-such"))
    assert refused(authenticator, {}).status == 401  # not 500: the store was never asked


# --- configuration -----------------------------------------------------------------------------------------


def test_auth_settings_from_the_environment() -> None:
    env = {"SAGEMAKER_ENDPOINT_NAME": "llm"}
    assert Config.from_env(env).auth_mode == "iam"
    cfg = Config.from_env({**env, "AUTH_MODE": "API_KEY", "API_KEYS": f" {KEY_A}, ,{KEY_B} "})
    assert (cfg.auth_mode, cfg.api_keys, cfg.api_keys_parameter) == ("api_key", (KEY_A, KEY_B), None)
    cfg = Config.from_env({**env, "AUTH_MODE": "api_key", "API_KEYS_PARAMETER": "/k", "API_KEYS_MAX_AGE_S": "60"})
    assert (cfg.api_keys_parameter, cfg.api_keys_max_age_s) == ("/k", 60)
    with pytest.raises(ConfigError, match="AUTH_MODE"):
        Config.from_env({**env, "AUTH_MODE": "open"})
    with pytest.raises(ConfigError, match="API_KEYS_PARAMETER"):
        Config.from_env({**env, "AUTH_MODE": "api_key"})


def test_telemetry_settings_from_the_environment() -> None:
    env = {"SAGEMAKER_ENDPOINT_NAME": "llm"}
    assert (Config.from_env(env).log_payloads, Config.from_env(env).tracing) == (False, False)
    assert Config.from_env({**env, "LOG_PAYLOADS": "true"}).log_payloads
    assert Config.from_env({**env, "POWERTOOLS_TRACE_DISABLED": "false"}).tracing
    assert not Config.from_env({**env, "POWERTOOLS_TRACE_DISABLED": "true"}).tracing


def test_docstring_example_holds() -> None:
    result = doctest.testmod(auth, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
