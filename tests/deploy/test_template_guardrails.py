"""``GuardrailId`` and its parameters through both transforms as CloudFormation runs them: the parameters are the
``GUARDRAIL_*`` settings with their defaults and choices, and the role may do on Bedrock exactly what the function
does (every call ApplyGuardrail sends, recorded against the stand-in on loopback), on that one guardrail, and only
with one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sagestream.config import GuardrailPolicy
from sagestream.guardrails import Guardrails, make_client
from sagestream.settings import SETTING
from sagestream_local.guardrail import LocalGuardrail, Rules
from tests.cfn import load_template
from tests.deploy.conftest import ROOT
from tests.deploy.test_template import _deployed
from tests.deploy.test_template_quotas import _actions, _mentions, _role_statements

PARAMETERS = {
    "GUARDRAIL_ID": "GuardrailId",
    "GUARDRAIL_VERSION": "GuardrailVersion",
    "GUARDRAIL_SIDES": "GuardrailSides",
    "GUARDRAIL_OUTPUT_MODE": "GuardrailOutputMode",
    "GUARDRAIL_WINDOW_CHARS": "GuardrailWindowChars",
    "GUARDRAIL_FAIL": "GuardrailFail",
}
# IAM's action for each Bedrock Runtime operation the function may send (any other is a KeyError: the test says so).
IAM_ACTION = {"ApplyGuardrail": "bedrock:ApplyGuardrail"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def test_the_parameters_are_the_settings_with_their_defaults_and_choices(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    variables = template["Resources"]["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    for env, name in PARAMETERS.items():
        setting = SETTING[env]
        assert setting.template_parameter == name
        assert variables[env] == {"Ref": name}
        default = parameters[name]["Default"]
        assert str(default) == ("" if setting.default is None else str(setting.default)), name
        if setting.choices:
            assert tuple(parameters[name]["AllowedValues"]) == setting.choices, name
        setting.parse(str(default))  # the default is one the function accepts
    assert template["Conditions"]["HasGuardrail"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "GuardrailId"}, ""]}]}


def _what_the_function_calls() -> tuple[set[str], set[str]]:
    """The IAM actions, and the guardrails named, of every call the function sends for a prompt and an answer."""
    sent: list[tuple[str, dict[str, Any]]] = []
    with LocalGuardrail("abc123def456", rules=Rules(denied_words=("zorp",))) as stand_in:
        client = make_client_at(stand_in.url)
        client.meta.events.register(
            "before-parameter-build.bedrock-runtime", lambda model, params, **_: sent.append((model.name, params))
        )
        guard = Guardrails(client)
        policy = GuardrailPolicy("abc123def456", version="3")
        guard.assess(policy, "a prompt", "INPUT", deadline=None)
        guard.assess(policy, "an answer with zorp", "OUTPUT", deadline=None)
    assert [name for name, _ in sent] == ["ApplyGuardrail", "ApplyGuardrail"]
    return {IAM_ACTION[name] for name, _ in sent}, {p["guardrailIdentifier"] for _, p in sent}


def make_client_at(url: str) -> Any:
    import os
    from unittest import mock

    env = {
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    with mock.patch.dict(os.environ, env):
        return make_client()


def test_no_bedrock_grant_by_default(sam: Path) -> None:
    resources = _deployed(sam)
    assert not [s for s in _role_statements(resources) if any(a.startswith("bedrock:") for a in _actions(s))]
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["GUARDRAIL_ID"] == ""
    assert SETTING["GUARDRAIL_ID"].parse(variables["GUARDRAIL_ID"]) is None  # empty: no guardrail


def test_the_role_may_apply_that_guardrail_alone_and_nothing_else_of_bedrock(sam: Path) -> None:
    actions, guardrails = _what_the_function_calls()
    resources = _deployed(sam, GuardrailId="abc123def456")
    on_bedrock = [s for s in _role_statements(resources) if any(a.startswith("bedrock") for a in _actions(s))]
    assert len(on_bedrock) == 1
    (statement,) = on_bedrock
    assert statement["Effect"] == "Allow" and set(_actions(statement)) == actions == {"bedrock:ApplyGuardrail"}
    resource = statement["Resource"]
    text = resource["Fn::Sub"] if isinstance(resource, dict) else resource
    assert text.endswith(":guardrail/${GuardrailId}") or text.endswith(":guardrail/abc123def456"), text
    assert guardrails == {"abc123def456"}  # what the function names is the parameter, the resource's last part
    assert not _mentions(statement, "*")
