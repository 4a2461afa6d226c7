"""The configuration: defaults, each setting read from its variable, and bad values refused by name at init."""

from __future__ import annotations

import pytest

from sagestream.config import Config, ConfigError
from sagestream.sse import MIN_PAD_BYTES, ChunkEncoder

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
        ({**BASE, "PROMPT_TEMPLATE": "no-such-template"}, "PROMPT_TEMPLATE"),
        ({**BASE, "SSE_PAD_BYTES": "3"}, "SSE_PAD_BYTES"),
    ],
)
def test_a_bad_setting_is_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_env(env)


def test_the_pad_minimum_is_the_encoders() -> None:
    cfg = Config.from_env({**BASE, "SSE_PAD_BYTES": str(MIN_PAD_BYTES)})
    event = ChunkEncoder(model="m", kind="completion", include_usage=False, pad_bytes=cfg.sse_pad_bytes)
    assert cfg.sse_pad_bytes == MIN_PAD_BYTES == 4
    assert event.encode(__import__("sagestream.dialects").dialects.Delta("x")).endswith(b":" + b" " + b"\n\n")
