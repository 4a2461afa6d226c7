"""template.yaml in AuthMode jwt, both ways: a Cognito user pool the stack creates for the chat page, or an
existing issuer given as parameters. cfn-lint resolves parameters from their defaults, so each way is linted
as a copy of the template whose defaults are that way's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cfn import load_template
from tests.deploy.conftest import ROOT, sam_lint, with_defaults

PARAMETER = "parameter/${AWS::StackName}/page-client-id"
WAYS = {
    "created user pool": {"AuthMode": "jwt", "CreateUserPool": "true", "ServeUi": "true"},
    "existing issuer": {
        "AuthMode": "jwt",
        "JwtIssuer": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
        "JwtAudience": "1example23456789",
        "JwtRequiredScopes": "sagestream/invoke",
        "JwtPageClientId": "1example23456789",
    },
}


@pytest.mark.parametrize("way", WAYS.values(), ids=WAYS.keys())
def test_sam_validate_lint_is_clean_both_ways(sam: Path, tmp_path: Path, way: dict[str, str]) -> None:
    template = tmp_path / "template.yaml"
    template.write_text(with_defaults((ROOT / "template.yaml").read_text(), way))
    result = sam_lint(sam, template)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def test_the_page_client_is_public_with_the_code_flow_back_to_the_function_url(template: dict[str, Any]) -> None:
    client = template["Resources"]["PageClient"]
    assert client["Condition"] == "CreatesUserPool"
    props = client["Properties"]
    assert props["GenerateSecret"] is False, "a secret in a page is no secret"
    assert props["AllowedOAuthFlows"] == ["code"]
    # Back to the URL to call, whichever front: the same value as the Url output.
    url = template["Outputs"]["Url"]["Value"]
    assert url["Fn::If"][:2] == ["UrlFront", {"Fn::GetAtt": ["SageStreamFunctionUrl", "FunctionUrl"]}]
    assert props["CallbackURLs"] == [url] and props["LogoutURLs"] == [url]
    assert "sagestream/invoke" in props["AllowedOAuthScopes"]


def test_the_function_may_read_the_client_id_parameter_and_nothing_else_of_the_pool(template: dict[str, Any]) -> None:
    function = template["Resources"]["SageStreamFunction"]["Properties"]
    env = function["Environment"]["Variables"]
    assert env["JWT_CLIENT_ID_PARAMETER"] == {
        "Fn::If": ["CreatesUserPool", {"Fn::Sub": "/${AWS::StackName}/page-client-id"}, ""]
    }
    assert template["Resources"]["PageClientIdParameter"]["Properties"]["Name"] == {
        "Fn::Sub": "/${AWS::StackName}/page-client-id"
    }
    grants = [
        s["Fn::If"][1]
        for p in function["Policies"]
        for s in p["Statement"]
        if "Fn::If" in s and s["Fn::If"][0] == "CreatesUserPool"
    ]
    assert grants == [
        {
            "Sid": "ReadThePageClientId",
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:" + PARAMETER},
        }
    ]
