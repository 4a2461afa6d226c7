"""The configuration: defaults, each setting read from its variable, and bad values refused by name at init."""

from __future__ import annotations

import re

import pytest

from sagestream.config import Config, ConfigError
from sagestream.protocols._wire import MIN_PAD_BYTES
from sagestream.protocols.openai.encoder import ChunkEncoder

BASE = {"SAGEMAKER_ENDPOINT_NAME": "llm"}


def test_defaults() -> None:
    cfg = Config.from_env(BASE)
    assert (cfg.endpoint_name, cfg.model_id, cfg.dialect, cfg.auth_mode) == ("llm", "llm", "openai", "iam")
    assert (cfg.sse_pad_bytes, cfg.deadline_margin_ms, cfg.max_attempts, cfg.serve_ui) == (0, 3000, 3, False)
    assert cfg.tracing is False and cfg.log_payloads is False


def test_each_setting_is_read() -> None:
    cfg = Config.from_env(
        {
            **BASE,
            "UPSTREAM_FORMAT": "LMI",
            "MODEL_ID": "llama",
            "INFERENCE_COMPONENT_NAME": "ic",
            "TARGET_VARIANT": "blue",
            "MAX_TOKENS_LIMIT": "64",
            "PROMPT_TEMPLATE": "llama3",
            "SSE_PAD_BYTES": "512",
            "UPSTREAM_READ_TIMEOUT_S": "2.5",
            "UPSTREAM_MAX_ATTEMPTS": "1",
            "SERVE_UI": "yes",
            "AUTH_MODE": "api_key",
            "API_KEYS": "a, b",
            "LOG_PAYLOADS": "true",
            "POWERTOOLS_TRACE_DISABLED": "false",
        }
    )
    assert (cfg.dialect, cfg.model_id, cfg.inference_component, cfg.target_variant) == ("lmi", "llama", "ic", "blue")
    assert (cfg.max_tokens_limit, cfg.prompt_template, cfg.sse_pad_bytes) == (64, "llama3", 512)
    assert (cfg.read_timeout_s, cfg.max_attempts, cfg.serve_ui) == (2.5, 1, True)
    assert (cfg.auth_mode, cfg.api_keys, cfg.log_payloads, cfg.tracing) == ("api_key", ("a", "b"), True, True)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "SAGEMAKER_ENDPOINT_NAME"),
        ({**BASE, "UPSTREAM_FORMAT": "klingon"}, "UPSTREAM_FORMAT"),
        ({**BASE, "MAX_TOKENS_LIMIT": "0"}, "MAX_TOKENS_LIMIT"),
        ({**BASE, "UPSTREAM_READ_TIMEOUT_S": "soon"}, "UPSTREAM_READ_TIMEOUT_S"),
        ({**BASE, "SERVE_UI": "perhaps"}, "SERVE_UI"),
        ({**BASE, "AUTH_MODE": "open"}, "AUTH_MODE"),
        ({**BASE, "AUTH_MODE": "api_key"}, "API_KEYS_PARAMETER"),
        ({**BASE, "AUTH_MODE": "api_key", "API_KEY_SOURCE": "apigw"}, "API_KEY_SOURCE"),
        ({**BASE, "PROMPT_TEMPLATE": "no-such-template"}, "PROMPT_TEMPLATE"),
        ({**BASE, "SSE_PAD_BYTES": "3"}, "SSE_PAD_BYTES"),
    ],
)
def test_a_bad_setting_is_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_env(env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**BASE, "UPSTREAM_FORMAT": "klingon"}, "UPSTREAM_FORMAT='klingon'; expected one of openai, tgi, lmi"),
        ({**BASE, "PROMPT_TEMPLATE": "alpaca"}, "PROMPT_TEMPLATE='alpaca'; expected one of chatml, llama3"),
        ({**BASE, "UPSTREAM_CONNECT_TIMEOUT_S": "0"}, "UPSTREAM_CONNECT_TIMEOUT_S=0.0 must be more than 0"),
    ],
)
def test_a_choice_or_a_rule_broken_is_named_with_what_is_allowed(env: dict[str, str], message: str) -> None:
    # One wording for every choice (AUTH_MODE's); a timeout of 0, once silently the default, is refused.
    with pytest.raises(ConfigError) as refused:
        Config.from_env(env)
    assert str(refused.value) == message


def test_the_pad_minimum_is_the_encoders() -> None:
    cfg = Config.from_env({**BASE, "SSE_PAD_BYTES": str(MIN_PAD_BYTES)})
    event = ChunkEncoder(model="m", kind="completion", include_usage=False, pad_bytes=cfg.sse_pad_bytes)
    assert cfg.sse_pad_bytes == MIN_PAD_BYTES == 4
    assert event.encode(__import__("sagestream.dialects").dialects.Delta("x")).endswith(b":" + b" " + b"\n\n")


# --- several models ---------------------------------------------------------------------------------------

MODELS = '{"a": {"endpoint": "e-a"}, "b": {"endpoint": "e-b", "inference_component": "ic-b", "upstream_format": "lmi"}}'


def test_models_fill_unset_keys_from_the_global_settings_but_not_the_inference_component() -> None:
    cfg = Config.from_env(
        {"MODELS": MODELS, "UPSTREAM_FORMAT": "tgi", "MAX_TOKENS_LIMIT": "99", "TARGET_VARIANT": "blue"}
    )
    assert cfg.model_ids == ("a", "b")
    a, b = cfg.for_model("a"), cfg.for_model("b")
    assert a is not None and b is not None
    assert (a.endpoint_name, a.dialect, a.max_tokens_limit, a.target_variant, a.inference_component) == (
        "e-a",
        "tgi",
        99,
        "blue",
        None,
    )
    assert (b.endpoint_name, b.dialect, b.inference_component) == ("e-b", "lmi", "ic-b")
    assert (cfg.model_id, cfg.endpoint_name) == ("a", "e-a"), "the first model is the default"
    assert cfg.for_model("c") is None


def test_the_one_model_case_is_the_single_settings() -> None:
    cfg = Config.from_env({**BASE, "MODEL_ID": "m"})
    assert cfg.model_ids == ("m",) and cfg.for_model("m") is cfg and cfg.for_model("llm") is None


def test_models_come_from_an_ssm_parameter_read_at_init() -> None:
    asked: list[str] = []

    def fetch(name: str) -> str:
        asked.append(name)
        return MODELS

    cfg = Config.from_env({"MODELS_PARAMETER": "/sagestream/models"}, fetch_parameter=fetch)
    assert asked == ["/sagestream/models"] and cfg.model_ids == ("a", "b")


def test_an_unreadable_models_parameter_stops_init_naming_it() -> None:
    def fetch(name: str) -> str:
        raise RuntimeError("ParameterNotFound")

    with pytest.raises(ConfigError, match="MODELS_PARAMETER='/missing' could not be read: ParameterNotFound"):
        Config.from_env({"MODELS_PARAMETER": "/missing"}, fetch_parameter=fetch)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MODELS": "{"}, "MODELS is not JSON"),
        ({"MODELS": "{}"}, "MODELS must be a non-empty JSON object"),
        ({"MODELS": '["a"]'}, "MODELS must be a non-empty JSON object"),
        ({"MODELS": '{"a": "e-a"}'}, "model 'a': must be an object"),
        ({"MODELS": '{"a": {}}'}, "model 'a': key 'endpoint': Field required"),
        ({"MODELS": '{"a": {"endpoint": "e", "max_tokens_limit": "9"}}'}, "model 'a': key 'max_tokens_limit'"),
        ({"MODELS": '{"a": {"endpoint": "e", "upstream_format": "vllm"}}'}, "model 'a': key 'upstream_format'"),
        ({"MODELS": '{"a": {"endpoint": "e", "prompt_template": "alpaca"}}'}, "model 'a': key 'prompt_template'"),
        ({"MODELS": '{"a": {"endpoint": "e", "model": "x"}}'}, "model 'a': key 'model' is not a setting"),
        ({"MODELS": '{" a": {"endpoint": "e"}}'}, "model id ' a' must be non-empty"),
        ({"MODELS": MODELS, "MODELS_PARAMETER": "/p"}, "MODELS and MODELS_PARAMETER are exclusive"),
        ({"MODELS": MODELS, "MODEL_ID": "m"}, "MODEL_ID is for one model"),
        ({"MODELS": MODELS, "INFERENCE_COMPONENT_NAME": "ic"}, "INFERENCE_COMPONENT_NAME is for one model"),
        ({"MODELS": MODELS, "SAGEMAKER_ENDPOINT_NAME": "e-z"}, "SAGEMAKER_ENDPOINT_NAME='e-z' is not the endpoint"),
    ],
)
def test_a_bad_models_setting_is_refused_at_init_naming_the_model_and_key(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.from_env(env)


def test_the_endpoint_name_may_name_one_of_the_models_endpoints() -> None:
    assert Config.from_env({"MODELS": MODELS, "SAGEMAKER_ENDPOINT_NAME": "e-b"}).model_ids == ("a", "b")


def test_prefix_aware_routing_is_off_unless_set_and_each_model_may_differ_from_the_global_setting() -> None:
    assert Config.from_env(BASE).prefix_aware_routing is False
    assert Config.from_env({**BASE, "PREFIX_AWARE_ROUTING": "true"}).prefix_aware_routing is True
    models = '{"a": {"endpoint": "e-a"}, "b": {"endpoint": "e-b", "prefix_aware_routing": false}}'
    cfg = Config.from_env({"MODELS": models, "PREFIX_AWARE_ROUTING": "true"})
    a, b = cfg.for_model("a"), cfg.for_model("b")
    assert a is not None and b is not None
    assert (a.prefix_aware_routing, b.prefix_aware_routing) == (True, False)
    only_one = Config.from_env(
        {"MODELS": '{"a": {"endpoint": "e-a", "prefix_aware_routing": true}, "b": {"endpoint": "e-b"}}'}
    )
    assert [only_one.for_model(m).prefix_aware_routing for m in ("a", "b")] == [True, False]  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="PREFIX_AWARE_ROUTING"):
        Config.from_env({**BASE, "PREFIX_AWARE_ROUTING": "sometimes"})
    with pytest.raises(ConfigError, match="prefix_aware_routing"):
        Config.from_env({"MODELS": '{"a": {"endpoint": "e-a", "prefix_aware_routing": "yes"}}'})


# --- AUTH_MODE=jwt ---------------------------------------------------------------------------------------


def test_jwt_mode_needs_an_issuer_and_an_audience_and_https() -> None:
    with pytest.raises(ConfigError, match="JWT_ISSUER"):
        Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e", "AUTH_MODE": "jwt", "JWT_AUDIENCE": "app"})
    with pytest.raises(ConfigError, match="https"):
        Config.from_env(
            {"SAGEMAKER_ENDPOINT_NAME": "e", "AUTH_MODE": "jwt", "JWT_ISSUER": "http://id.example", "JWT_AUDIENCE": "a"}
        )
    cfg = Config.from_env(
        {
            "SAGEMAKER_ENDPOINT_NAME": "e",
            "AUTH_MODE": "jwt",
            "JWT_ISSUER": "http://127.0.0.1:9000",
            "JWT_AUDIENCE": "api, app",
            "JWT_REQUIRED_SCOPES": "sagestream/invoke read",
        }
    )
    assert (cfg.jwt_audience, cfg.jwt_required_scopes) == (("api", "app"), ("sagestream/invoke", "read"))


def test_the_templates_app_client_id_comes_from_its_parameter_as_audience_and_page_client() -> None:
    asked: list[str] = []

    def fetch(name: str) -> str:
        asked.append(name)
        return "3abcclientid\n"

    cfg = Config.from_env(
        {
            "SAGEMAKER_ENDPOINT_NAME": "e",
            "AUTH_MODE": "jwt",
            "JWT_ISSUER": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_abc",
            "JWT_CLIENT_ID_PARAMETER": "/stack/page-client-id",
        },
        fetch_parameter=fetch,
    )
    assert asked == ["/stack/page-client-id"]
    assert (cfg.jwt_audience, cfg.jwt_page_client_id) == (("3abcclientid",), "3abcclientid")


@pytest.mark.parametrize(
    ("env", "field", "dialect"),
    [
        ({**BASE, "UPSTREAM_FORMAT": "tgi", "EXTRA_REQUEST_FIELDS": "top_k,max_new_tokens"}, "max_new_tokens", "tgi"),
        ({**BASE, "UPSTREAM_FORMAT": "tgi", "EXTRA_REQUEST_FIELDS": "details"}, "details", "tgi"),
        ({**BASE, "UPSTREAM_FORMAT": "lmi", "EXTRA_REQUEST_FIELDS": "stop_sequences"}, "stop_sequences", "lmi"),
        (
            {
                "MODELS": '{"a": {"endpoint": "e1"}, "b": {"endpoint": "e2", "upstream_format": "tgi"}}',
                "EXTRA_REQUEST_FIELDS": "grammar",
            },
            "grammar",
            "tgi",
        ),
    ],
    ids=["tgi-max_new_tokens", "tgi-details", "lmi-stop_sequences", "models-tgi-grammar"],
)
def test_a_vendor_field_the_function_sets_is_refused_at_init_naming_variable_field_and_dialect(
    env: dict[str, str], field: str, dialect: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_env(env)
    message = str(info.value)
    assert "EXTRA_REQUEST_FIELDS" in message and field in message and f"UPSTREAM_FORMAT={dialect}" in message


def test_a_name_computed_by_one_dialect_is_a_vendor_field_for_another() -> None:
    # openai sets max_tokens, not max_new_tokens: there the name is the container's own extra.
    cfg = Config.from_env({**BASE, "UPSTREAM_FORMAT": "openai", "EXTRA_REQUEST_FIELDS": "max_new_tokens,top_k"})
    assert cfg.extra_request_fields == {"max_new_tokens", "top_k"}


def test_api_key_mode_behind_a_rest_front_needs_no_keys_of_its_own() -> None:
    cfg = Config.from_env({**BASE, "AUTH_MODE": "api_key", "API_KEY_SOURCE": "gateway"})
    assert (cfg.auth_mode, cfg.api_key_source, cfg.api_keys_parameter) == ("api_key", "gateway", None)
    assert Config.from_env(BASE).api_key_source == "function"
