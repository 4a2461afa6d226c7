"""The declaration of settings: each parsed by its kind with errors that name it, every Config field and every
variable the function reads declared there, and docs/configuration.md's table made from it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sagestream import telemetry
from sagestream.config import Config
from sagestream.settings import READ_BY_CONFIG, REGENERATE, SETTING, SETTINGS, ConfigError, markdown_table, with_table
from sagestream_local import cors

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_configuration_page_shows_the_declared_table() -> None:
    page = PAGE.read_text()
    assert markdown_table() in page
    assert with_table(page) == page, f"docs/configuration.md is out of date: run `{REGENERATE}` (make settings-doc)"


def test_the_page_would_show_a_changed_declaration() -> None:
    changed = SETTING["SERVE_UI"]._replace(meaning="serve something else")
    assert "serve something else" in markdown_table((changed,))
    assert markdown_table((changed,)) not in PAGE.read_text()


def test_each_setting_is_in_the_table_once() -> None:
    assert len(SETTING) == len(SETTINGS)
    rows = markdown_table().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{s.env}`" for s in SETTINGS]


class RecordingEnv(Mapping[str, str]):
    """An environment that notes each variable asked for."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values, self.asked = values, set[str]()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return self.values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the configuration reads named variables, it does not scan the environment")

    def __len__(self) -> int:
        return len(self.values)


def test_the_function_reads_every_declared_setting_and_nothing_undeclared() -> None:
    env = RecordingEnv({"SAGEMAKER_ENDPOINT_NAME": "llm"})
    Config.from_env(env)
    assert env.asked == {s.env for s in SETTINGS if s.read_by == READ_BY_CONFIG}


def test_every_config_field_is_filled_by_a_declared_setting_or_a_named_rule() -> None:
    declared = {s.field for s in SETTINGS if s.field is not None}
    # tracing: POWERTOOLS_TRACE_DISABLED inverted; models: MODELS or MODELS_PARAMETER's JSON (config.several_models);
    # fallbacks: a model's own, from its MODELS entry (Config.for_model); quotas: QUOTAS read (config.quota_policy);
    # guardrail: the GUARDRAIL_* settings read together, or a model's own (config.guardrail_policy)
    assert set(Config.__struct_fields__) - declared == {"tracing", "models", "fallbacks", "quotas", "guardrail"}
    assert len(declared) == len([s for s in SETTINGS if s.field is not None]), "one setting per field"


def test_the_declared_defaults_are_the_configs_own() -> None:
    bare = Config(endpoint_name="llm")
    for setting in SETTINGS:
        if setting.field in (None, "endpoint_name", "model_id"):  # model_id's default is the endpoint's name
            continue
        assert getattr(bare, setting.field) == setting.default, setting.env
    assert Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "llm"}) == msgspec.structs.replace(bare, model_id="llm")


def test_settings_read_elsewhere_declare_their_readers_defaults() -> None:
    assert SETTING["POWERTOOLS_SERVICE_NAME"].default == telemetry.DEFAULT_SERVICE
    assert SETTING["POWERTOOLS_METRICS_NAMESPACE"].default == telemetry.DEFAULT_SERVICE
    assert cors.Cors.from_setting(None).origins == SETTING["ALLOWED_ORIGINS"].default


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("TARGET_VARIANT", "  blue ", "blue"),
        ("TARGET_VARIANT", "   ", None),
        ("UPSTREAM_FORMAT", "TGI", "tgi"),
        ("UPSTREAM_FORMAT", None, "openai"),
        ("MAX_TOKENS_LIMIT", "64", 64),
        ("UPSTREAM_READ_TIMEOUT_S", "2.5", 2.5),
        ("SERVE_UI", "Yes", True),
        ("SERVE_UI", "", False),
        ("POWERTOOLS_TRACE_DISABLED", None, True),
        ("API_KEYS", " a, ,b ", ("a", "b")),
        ("EXTRA_REQUEST_FIELDS", "top_k,min_p,top_k", frozenset({"top_k", "min_p"})),
        ("JWT_AUDIENCE", "api, app web", ("api", "app", "web")),
        ("SSE_PAD_BYTES", "4", 4),
    ],
)
def test_each_kind_parses_as_the_table_says(name: str, raw: str | None, value: object) -> None:
    assert SETTING[name].parse(raw) == value


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("MAX_TOKENS_LIMIT", "lots", "MAX_TOKENS_LIMIT='lots' is not a whole number"),
        ("MAX_TOKENS_LIMIT", "0", "MAX_TOKENS_LIMIT='0' must be at least 1"),
        ("DEADLINE_MARGIN_MS", "-1", "DEADLINE_MARGIN_MS='-1' must be at least 0"),
        ("UPSTREAM_READ_TIMEOUT_S", "soon", "UPSTREAM_READ_TIMEOUT_S='soon' is not a number"),
        ("UPSTREAM_READ_TIMEOUT_S", "0", "UPSTREAM_READ_TIMEOUT_S=0.0 must be more than 0"),
        ("UPSTREAM_CONNECT_TIMEOUT_S", "0", "UPSTREAM_CONNECT_TIMEOUT_S=0.0 must be more than 0"),
        ("SERVE_UI", "perhaps", "SERVE_UI='perhaps' is not true or false"),
        ("AUTH_MODE", "Open", "AUTH_MODE='open'; expected one of iam, api_key, jwt, none"),
        ("UPSTREAM_FORMAT", "vllm", "UPSTREAM_FORMAT='vllm'; expected one of openai, tgi, lmi"),
        ("PROMPT_TEMPLATE", "alpaca", "PROMPT_TEMPLATE='alpaca'; expected one of chatml, llama3"),
        ("SSE_PAD_BYTES", "3", "SSE_PAD_BYTES=3 must be 0 or at least 4 (an SSE comment: ':', padding, a blank line)"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_the_value_and_the_rule(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        SETTING[name].parse(raw)
    assert str(refused.value) == message
