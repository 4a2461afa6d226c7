"""template.yaml: valid for cfn-lint, least privilege in what it grants, and every parameter documented."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cfn import load_template
from tests.deploy.conftest import ROOT, SAM_ENV


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def function(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]["SageStreamFunction"]["Properties"]


def _statements(function: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """Each policy statement, with the condition it is under (``!If [cond, statement, NoValue]``) or None."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    for policy in function["Policies"]:
        for statement in policy["Statement"]:
            if "Fn::If" in statement:
                condition, then, otherwise = statement["Fn::If"]
                assert otherwise == {"Ref": "AWS::NoValue"}
                out.append((condition, then))
            else:
                out.append((None, statement))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def test_sam_validate_lint_is_clean(sam: Path) -> None:
    result = subprocess.run(
        [str(sam), "validate", "--lint", "--region", "us-east-1", "--template-file", "template.yaml"],
        cwd=ROOT,
        env=SAM_ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_function_streams_on_python313_arm64_through_the_wrapper(function: dict[str, Any]) -> None:
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert function["Environment"]["Variables"]["AWS_LAMBDA_EXEC_WRAPPER"] == "/var/task/sagestream-bootstrap"
    url = function["FunctionUrlConfig"]
    assert url["InvokeMode"] == "RESPONSE_STREAM"
    assert url["AuthType"] == {"Fn::If": ["OpenUrl", "NONE", "AWS_IAM"]}
    assert {"authorization", "content-type"} <= set(url["Cors"]["AllowHeaders"])


def test_sagemaker_is_granted_on_the_one_endpoint_and_inference_component_only(function: dict[str, Any]) -> None:
    sagemaker = [s for _, s in _statements(function) if any(a.startswith("sagemaker:") for a in _strings(s["Action"]))]
    assert len(sagemaker) == 1
    (statement,) = sagemaker
    assert sorted(statement["Action"]) == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
    resources = _strings(statement["Resource"])
    prefix = "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:"
    assert f"{prefix}endpoint/${{EndpointName}}" in resources
    assert f"{prefix}inference-component/${{InferenceComponentName}}" in resources
    assert statement["Resource"][1]["Fn::If"][0] == "HasInferenceComponent"


def test_nothing_is_granted_on_every_resource(function: dict[str, Any]) -> None:
    for _, statement in _statements(function):
        for resource in _strings(statement["Resource"]):
            assert "*" not in resource.removesuffix("-??????"), f"{statement.get('Sid')}: {resource}"


def test_the_api_keys_are_readable_only_in_api_key_mode(function: dict[str, Any]) -> None:
    reads = [
        (condition, statement)
        for condition, statement in _statements(function)
        if set(_strings(statement["Action"])) & {"ssm:GetParameter", "secretsmanager:GetSecretValue", "kms:Decrypt"}
    ]
    assert {a for _, s in reads for a in _strings(s["Action"])} == {
        "ssm:GetParameter",
        "secretsmanager:GetSecretValue",
        "kms:Decrypt",
    }
    for condition, statement in reads:
        assert condition in ("ApiKeyMode", "ApiKeysNeedKms"), statement
        assert any("ApiKeys" in s for s in _strings(statement["Resource"]))


def test_the_endpoint_name_pattern_takes_lower_case_names_only(template: dict[str, Any]) -> None:
    pattern = re.compile(template["Parameters"]["EndpointName"]["AllowedPattern"])
    assert pattern.fullmatch("my-llm-endpoint-1")
    assert not pattern.fullmatch("My-LLM")  # IAM would compare it with the lower-cased ARN, and deny
    assert not pattern.fullmatch("-leading-hyphen")
    assert not pattern.fullmatch("x" * 64)


def test_every_parameter_is_in_the_readme_and_samconfig_names_only_real_ones(template: dict[str, Any]) -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Deploy") :]
    documented = set(re.findall(r"^\| `([A-Za-z]+)` \|", table, flags=re.MULTILINE))
    assert set(template["Parameters"]) <= documented, sorted(set(template["Parameters"]) - documented)
    samconfig = (ROOT / "samconfig.toml").read_text()
    for overrides in re.findall(r'^parameter_overrides = "(.*)"$', samconfig, flags=re.MULTILINE):
        for name in re.findall(r"(\w+)=", overrides):
            assert name in template["Parameters"], name


def test_outputs_give_the_url_and_the_function(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    assert outputs["FunctionUrl"]["Value"] == {"Fn::GetAtt": ["SageStreamFunctionUrl", "FunctionUrl"]}
    assert json.dumps(outputs["FunctionName"]["Value"]) == '{"Ref": "SageStreamFunction"}'
    assert outputs["FunctionArn"]["Value"] == {"Fn::GetAtt": ["SageStreamFunction", "Arn"]}


# SAM's own transform, run locally: what CloudFormation will actually create from the template.
_TRANSFORM = """
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

template = yaml_parse(open("template.yaml").read())
template["Resources"]["SageStreamFunction"]["Properties"]["CodeUri"] = "s3://bucket/artifact.zip"  # as packaged


class Policies:  # the managed policies SAM may attach, instead of asking IAM for the list
    def load(self):
        return {"AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
                "AWSXrayWriteOnlyAccess": "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"}


print(json.dumps(transform(template, {}, Policies())))
"""


@pytest.fixture(scope="module")
def transformed(sam: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(sam.parent / "python"), "-c", _TRANSFORM],
        cwd=ROOT,
        env={**SAM_ENV, "AWS_DEFAULT_REGION": "us-east-1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_an_open_url_gets_its_public_permissions_and_an_iam_url_none(transformed: dict[str, Any]) -> None:
    permissions = {k: v for k, v in transformed["Resources"].items() if v["Type"] == "AWS::Lambda::Permission"}
    assert {v["Properties"]["Action"] for v in permissions.values()} == {
        "lambda:InvokeFunctionUrl",
        "lambda:InvokeFunction",
    }
    for permission in permissions.values():
        assert permission["Condition"] == "OpenUrl"  # AWS_IAM mode: no public grant at all
        assert permission["Properties"]["Principal"] == "*"
    invoke = next(v for v in permissions.values() if v["Properties"]["Action"] == "lambda:InvokeFunction")
    assert invoke["Properties"]["InvokedViaFunctionUrl"] is True


def test_the_role_grants_only_the_template_statements(transformed: dict[str, Any]) -> None:
    role = transformed["Resources"]["SageStreamFunctionRole"]["Properties"]
    assert [p["PolicyDocument"]["Statement"] for p in role["Policies"]] == [
        [s if c is None else {"Fn::If": [c, s, {"Ref": "AWS::NoValue"}]} for c, s in _statements_of(transformed)]
    ]


def _statements_of(transformed: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    template = load_template(ROOT / "template.yaml")
    return _statements(template["Resources"]["SageStreamFunction"]["Properties"])
