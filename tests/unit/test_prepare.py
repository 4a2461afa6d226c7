"""sagestream.prepare: a completion request's body, model, upstream body, ids and owner, before the call."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sagestream.auth import Authenticator
from sagestream.call import Call
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.function_url import build_event
from sagestream.http import Request
from sagestream.identity import Identity
from sagestream.prepare import body_of, model_named, owner, read_target, target_of, upstream_ids, upstream_payload
from sagestream.protocols.openai import CHAT
from tests.fakes import call_of, context

TWO = '{"a": {"endpoint": "e-a"}, "b": {"endpoint": "e-b", "upstream_format": "tgi"}}'


def call(body: Any = None, headers: dict[str, str] | None = None, *, request_id: str = "req-1") -> Call:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    event = build_event(
        method="POST",
        raw_path="/v1/chat/completions",
        raw_query="",
        headers=list({"content-type": "application/json", **(headers or {})}.items()),
        body=raw,
        source_ip="127.0.0.1",
    )
    ctx = dataclasses.replace(context(), aws_request_id=request_id)
    return call_of(Request.from_event(event), ctx)


def config(**env: str) -> Config:
    return Config.from_env(env if "MODELS" in env else {"SAGEMAKER_ENDPOINT_NAME": "unit-llm", **env})


@pytest.mark.parametrize("media", ["text/plain", "", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_a_415_naming_its_type(media: str) -> None:
    with pytest.raises(APIError) as caught:
        body_of(call({}, {"content-type": media}).request, config())
    assert (caught.value.status, caught.value.code) == (415, "unsupported_media_type")
    assert (media or "missing") in caught.value.message


def test_a_json_suffix_and_parameters_are_json() -> None:
    for media in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert body_of(call({"x": 1}, {"content-type": media}).request, config()) == b'{"x": 1}'


def test_a_body_over_the_limit_is_a_413_with_both_sizes() -> None:
    with pytest.raises(APIError) as caught:
        body_of(call(b"{" + b" " * 200 + b"}").request, config(MAX_REQUEST_BYTES="100"))
    assert (caught.value.status, caught.value.code) == (413, "request_too_large")
    assert "202 bytes" in caught.value.message and "100" in caught.value.message


def test_the_model_named_is_read_before_the_parse_and_a_wrong_shape_is_left_to_it() -> None:
    assert model_named(b'{"model": "b"}') == (True, "b")
    assert model_named(b'{"messages": []}') == (True, None)
    assert model_named(b'{"model": ["b"]}') == (False, None)
    assert model_named(b'"just a string"') == (False, None)
    assert model_named(b"[" * 100_000) == (False, None)  # too deep for json: the parser's to refuse


def test_the_target_is_the_named_model_or_the_only_one() -> None:
    several = config(MODELS=TWO)
    assert target_of(several, "b").endpoint_name == "e-b"
    assert target_of(config(), None).model_id == config().model_id
    with pytest.raises(APIError) as missing:
        target_of(several, None)
    assert (missing.value.status, missing.value.param, missing.value.code) == (
        400,
        "model",
        "missing_required_parameter",
    )
    with pytest.raises(APIError) as unknown:
        target_of(several, "c")
    assert (unknown.value.status, unknown.value.code) == (404, "model_not_found")
    assert "'a'" in unknown.value.message and "'b'" in unknown.value.message


def test_read_target_tells_the_record_which_model_and_endpoint() -> None:
    asked = call({"model": "b", "messages": []})
    raw, cfg = read_target(config(MODELS=TWO), asked, CHAT)
    assert raw == asked.request.body and cfg.endpoint_name == "e-b"
    assert (asked.record.model, asked.record.endpoint, asked.record.dialect) == ("b", "e-b", "tgi")


def test_the_owner_is_the_verified_caller_the_keys_or_the_principal() -> None:
    keyed_cfg = config(AUTH_MODE="api_key", API_KEYS="k1,k2")
    auth = Authenticator(keyed_cfg)
    keyed = call({}, {"authorization": "Bearer not-a-key", "x-api-key": "k1"})
    auth.check(keyed.request.headers)
    assert owner(keyed_cfg, keyed, auth) == "key:k1", "the key that authenticated, not every key presented"
    twice = call({}, {"authorization": "Bearer k1", "x-api-key": "k1"})
    assert owner(keyed_cfg, twice, auth) == owner(keyed_cfg, call({}, {"x-api-key": "k1"}), auth) == "key:k1"
    signed_in = call({})
    signed_in.identity = Identity(sub="user-7")
    assert (
        owner(config(AUTH_MODE="jwt", JWT_ISSUER="https://issuer.example", JWT_AUDIENCE="app"), signed_in)
        == "jwt:https://issuer.example:user-7"
    )
    assert owner(config(AUTH_MODE="none"), call({})) == "anyone"


def test_ids_carry_the_request_id_and_with_prefix_routing_the_cache_key() -> None:
    ids = upstream_ids(call({}, request_id="8f3c2a1e-0d6b-4e55-9a0f-6e2b7c1d9a44"), config(), "conversation-9")
    assert ids.inference_id == "8f3c2a1e-0d6b-4e55-9a0f-6e2b7c1d9a44" and ids.prefix_aware_id is None
    routed = upstream_ids(call({}), config(PREFIX_AWARE_ROUTING="true"), "conversation-9")
    assert routed.prefix_aware_id is not None


def test_the_upstream_body_binds_user_to_the_verified_caller() -> None:
    cfg = config(UPSTREAM_FORMAT="openai")
    asked = call({"messages": [{"role": "user", "content": "Hi"}], "user": "someone-else"})
    asked.identity = Identity(sub="user-7")
    parsed = CHAT.parse(asked.request.body, cfg, "")
    body = json.loads(upstream_payload(asked, cfg, parsed, stream=True, max_tokens_default=16))
    assert body["user"] == "user-7" and body["stream"] is True
