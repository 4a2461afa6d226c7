"""template.yaml: valid for cfn-lint, least privilege in what it grants, and every parameter documented."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sagestream.protocols.anthropic import REFUSED_HEADERS
from sagestream_local import cors
from tests.cfn import load_template
from tests.deploy.conftest import ROOT, SAM_ENV, sam_lint, with_defaults


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def function(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]["SageStreamFunction"]["Properties"]


def url_config(function: dict[str, Any]) -> dict[str, Any]:
    """The Function URL's settings: ``!If [UrlFront, settings, NoValue]`` (Front RestApi makes no URL)."""
    condition, config, otherwise = function["FunctionUrlConfig"]["Fn::If"]
    assert (condition, otherwise) == ("UrlFront", {"Ref": "AWS::NoValue"})
    result: dict[str, Any] = config
    return result


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
    result = sam_lint(sam)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_function_streams_on_python313_arm64_through_the_wrapper(function: dict[str, Any]) -> None:
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert function["Environment"]["Variables"]["AWS_LAMBDA_EXEC_WRAPPER"] == "/var/task/sagestream-bootstrap"
    url = url_config(function)
    assert url["InvokeMode"] == "RESPONSE_STREAM"
    assert url["AuthType"] == {"Fn::If": ["OpenUrl", "NONE", "AWS_IAM"]}
    assert {"authorization", "content-type"} <= set(url["Cors"]["AllowHeaders"])


def test_the_url_cors_is_the_local_fronts_one_list(function: dict[str, Any]) -> None:
    """One owner: src/sagestream_local/cors.py. The deployed URL must not drift from what `make run` allows."""
    url_cors = url_config(function)["Cors"]
    assert url_cors["AllowHeaders"] == list(cors.ALLOW_HEADERS)
    assert url_cors["ExposeHeaders"] == list(cors.EXPOSE_HEADERS)
    assert url_cors["AllowMethods"] == list(cors.ALLOW_METHODS)
    assert url_cors["MaxAge"] == cors.MAX_AGE_S
    assert url_cors["AllowOrigins"] == {"Ref": "AllowedOrigins"}


def test_the_openai_js_sdks_headers_are_allowed_and_the_request_id_exposed() -> None:
    sdk = {f"x-stainless-{h}" for h in ("lang", "package-version", "os", "arch", "runtime", "runtime-version")}
    assert sdk | {"x-stainless-retry-count", "x-stainless-timeout", "openai-organization", "openai-project"} <= set(
        cors.ALLOW_HEADERS
    )
    assert "x-request-id" in cors.EXPOSE_HEADERS and "x-should-retry" in cors.EXPOSE_HEADERS


def test_the_anthropic_js_sdks_headers_are_allowed() -> None:
    # @anthropic-ai/sdk 1.x from a page (dangerouslyAllowBrowser): its version and browser opt-in, the key
    # header, its platform headers, and the helper name messages.stream() adds.
    platform = {f"x-stainless-{h}" for h in ("lang", "package-version", "os", "arch", "runtime", "runtime-version")}
    sent = {"anthropic-version", "anthropic-dangerous-direct-browser-access", "x-api-key", "x-stainless-helper"}
    assert platform | sent | {"anthropic-beta", "x-stainless-retry-count", "x-stainless-timeout"} <= set(
        cors.ALLOW_HEADERS
    )


def test_the_headers_messages_refuses_by_name_pass_the_preflight() -> None:
    # The SDK sends these for its workspace_id / user_profile_id parameters. A preflight that disallowed them
    # would fail the call with a bare network error; allowed, the page gets the 400 that names the header.
    assert set(REFUSED_HEADERS) <= set(cors.ALLOW_HEADERS)


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


def _model_grants(template: dict[str, Any]) -> dict[str, list[Any]]:
    """The ``Fn::ForEach`` loops of the other models' grants: loop name -> [variable, collection, resources]."""
    return {k: v for k, v in template["Resources"].items() if k.startswith("Fn::ForEach::")}


def test_each_listed_endpoint_and_inference_component_is_granted_by_its_own_arn(template: dict[str, Any]) -> None:
    loops = _model_grants(template)
    assert set(loops) == {"Fn::ForEach::ModelEndpointGrants", "Fn::ForEach::ModelInferenceComponentGrants"}
    prefix = "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:"
    for loop, listed, kind, condition in (
        ("ModelEndpointGrants", "ModelEndpointNames", "endpoint", "HasModelEndpoints"),
        (
            "ModelInferenceComponentGrants",
            "ModelInferenceComponentNames",
            "inference-component",
            "HasModelInferenceComponents",
        ),
    ):
        variable, collection, resources = loops[f"Fn::ForEach::{loop}"]
        assert (variable, collection) == ("Name", {"Ref": listed})
        assert template["Parameters"][listed]["Type"] == "CommaDelimitedList"
        ((_, grant),) = resources.items()
        assert grant["Type"] == "AWS::IAM::RolePolicy" and grant["Condition"] == condition
        assert grant["Properties"]["RoleName"] == {"Ref": "SageStreamFunctionRole"}
        (statement,) = grant["Properties"]["PolicyDocument"]["Statement"]
        assert sorted(statement["Action"]) == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
        assert statement["Resource"] == {"Fn::Sub": f"{prefix}{kind}/${{Name}}"}


def test_the_models_parameter_is_readable_only_when_named(function: dict[str, Any]) -> None:
    (read,) = [(c, s) for c, s in _statements(function) if s.get("Sid") == "ReadTheModelsParameter"]
    condition, statement = read
    assert condition == "HasModelsParameter" and statement["Action"] == "ssm:GetParameter"
    arns = [r for r in _strings(statement["Resource"]) if r.startswith("arn:")]
    assert len(arns) == 2 and all(r.endswith("${ModelsParameter}") for r in arns)


def test_nothing_is_granted_on_every_resource(template: dict[str, Any], function: dict[str, Any]) -> None:
    loop_statements = [
        (None, s)
        for _, _, resources in _model_grants(template).values()
        for grant in resources.values()
        for s in grant["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert loop_statements
    for _, statement in [*_statements(function), *loop_statements]:
        for resource in _strings(statement["Resource"]):
            assert "*" not in resource.removesuffix("-??????"), f"{statement.get('Sid')}: {resource}"


def test_the_api_keys_are_readable_only_in_api_key_mode(function: dict[str, Any]) -> None:
    reads = [
        (condition, statement)
        for condition, statement in _statements(function)
        if set(_strings(statement["Action"])) & {"ssm:GetParameter", "secretsmanager:GetSecretValue", "kms:Decrypt"}
        and statement.get("Sid") != "UseTheResponsesKeyThroughDynamoDB"  # the stored responses' table key
    ]
    assert {a for _, s in reads for a in _strings(s["Action"])} == {
        "ssm:GetParameter",
        "secretsmanager:GetSecretValue",
        "kms:Decrypt",
    }
    for condition, statement in reads:
        if statement.get("Sid") in ("ReadTheModelsParameter", "ReadThePageClientId"):
            continue  # the models' JSON, or the jwt page's client id (test_template_jwt.py), not the keys
        assert condition in ("FunctionChecksKeys", "ApiKeysNeedKms"), statement
        assert any("ApiKeys" in s for s in _strings(statement["Resource"]))


def test_the_endpoint_name_pattern_takes_lower_case_names_only(template: dict[str, Any]) -> None:
    pattern = re.compile(template["Parameters"]["EndpointName"]["AllowedPattern"])
    assert pattern.fullmatch("my-llm-endpoint-1")
    assert not pattern.fullmatch("My-LLM")  # IAM would compare it with the lower-cased ARN, and deny
    assert not pattern.fullmatch("-leading-hyphen")
    assert not pattern.fullmatch("x" * 64)


def test_every_parameter_is_in_the_deploy_page_and_samconfig_names_only_real_ones(template: dict[str, Any]) -> None:
    table = (ROOT / "docs" / "deploy.md").read_text()
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


# SAM's own transform, run locally: what CloudFormation will actually create from the template. The
# LanguageExtensions loops (the other models' grants) are left out here and expanded in a test of their own.
_TRANSFORM = """
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

template = yaml_parse(open("template.yaml").read())
template["Resources"]["SageStreamFunction"]["Properties"]["CodeUri"] = "s3://bucket/artifact.zip"  # as packaged
template["Transform"] = [t for t in template["Transform"] if t != "AWS::LanguageExtensions"]
template["Resources"] = {k: v for k, v in template["Resources"].items() if not k.startswith("Fn::ForEach::")}
# ManagedInstances and SnapStart off (the defaults), as AWS::LanguageExtensions resolves these !If before SAM
# reads them.
conditions = {
    "AutoPublishAlias": "PublishesVersions", "CapacityProviderConfig": "OnManagedInstances", "SnapStart": "SnapStartOn"
}
for name, condition in conditions.items():
    assert template["Resources"]["SageStreamFunction"]["Properties"].pop(name)["Fn::If"][0] == condition
# Front FunctionUrl (the default): the URL's settings, as LanguageExtensions leaves them.
properties = template["Resources"]["SageStreamFunction"]["Properties"]
properties["FunctionUrlConfig"] = properties["FunctionUrlConfig"]["Fn::If"][1]


class Policies:  # the managed policies SAM may attach, instead of asking IAM for the list
    def load(self):
        return {"AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
                "AWSXrayWriteOnlyAccess": "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"}


print(json.dumps(transform(template, {}, Policies())))
"""


def _run_in_sam(sam: Path, script: str, *args: str) -> Any:
    """``script`` run by SAM CLI's own Python (its translator and its LanguageExtensions), its JSON output."""
    out = subprocess.run(
        [str(sam.parent / "python"), "-c", script, *args],
        cwd=ROOT,
        env={**SAM_ENV, "AWS_DEFAULT_REGION": "us-east-1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def transformed(sam: Path) -> dict[str, Any]:
    result: dict[str, Any] = _run_in_sam(sam, _TRANSFORM)
    return result


def test_the_role_grants_only_the_template_statements(transformed: dict[str, Any]) -> None:
    role = transformed["Resources"]["SageStreamFunctionRole"]["Properties"]
    assert [p["PolicyDocument"]["Statement"] for p in role["Policies"]] == [
        [s if c is None else {"Fn::If": [c, s, {"Ref": "AWS::NoValue"}]} for c, s in _statements_of(transformed)]
    ]


# AWS::LanguageExtensions as SAM CLI implements it, with two other endpoints and one inference component.
_EXPAND_LOOPS = """
import json
from samcli.lib.cfn_language_extensions.api import process_template
from samcli.lib.cfn_language_extensions.models import PseudoParameterValues
from samtranslator.yaml_helper import yaml_parse

template = yaml_parse(open("template.yaml").read())
expanded = process_template(
    template,
    {"ModelEndpointNames": ["llm-b", "llm-c"], "ModelInferenceComponentNames": ["qwen-ic"]},
    PseudoParameterValues(region="us-east-1", account_id="123456789012", partition="aws"),
)
print(json.dumps(expanded))
"""


def test_the_listed_models_endpoints_become_one_exact_grant_each(sam: Path) -> None:
    expanded = _run_in_sam(sam, _EXPAND_LOOPS)
    roles = {k: v for k, v in expanded["Resources"].items() if v["Type"] == "AWS::IAM::RolePolicy"}
    grants = {k: v for k, v in roles.items() if k != "BackgroundResponsesGrant"}  # the store's, on the function
    prefix = "arn:aws:sagemaker:us-east-1:123456789012:"
    resources = {
        name: [s["Resource"] for s in grant["Properties"]["PolicyDocument"]["Statement"]]
        for name, grant in grants.items()
    }
    assert resources == {
        "ModelEndpointGrantllmb": [f"{prefix}endpoint/llm-b"],
        "ModelEndpointGrantllmc": [f"{prefix}endpoint/llm-c"],
        "ModelInferenceComponentGrantqwenic": [f"{prefix}inference-component/qwen-ic"],
    }
    for grant in grants.values():
        assert grant["Properties"]["RoleName"] == {"Ref": "SageStreamFunctionRole"}


def _statements_of(transformed: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    template = load_template(ROOT / "template.yaml")
    return _statements(template["Resources"]["SageStreamFunction"]["Properties"])


# --- Lambda Managed Instances (ManagedInstances=true) ----------------------------------------------------

_NETWORK = {"SubnetIds": "subnet-0123456789abcdef0", "SecurityGroupIds": "sg-0123456789abcdef0"}


def test_sam_validate_lint_is_clean_with_managed_instances_on(sam: Path, tmp_path: Path) -> None:
    """``sam validate`` takes no parameters: the same template with the option's defaults turned on."""
    defaults = {"ManagedInstances": "true", **_NETWORK, "VpcId": "vpc-0abc"}
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), defaults))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr


# Both transforms as CloudFormation runs them (AWS::LanguageExtensions as SAM CLI implements it, then SAM's),
# with the stack's parameters: SAM takes CapacityProviderConfig and AutoPublishAlias under no condition, so
# LanguageExtensions must have resolved their !If first.
_BOTH_TRANSFORMS = """
import json, sys
from samcli.lib.cfn_language_extensions.api import process_template
from samcli.lib.cfn_language_extensions.models import PseudoParameterValues
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

parameters = json.loads(sys.argv[1])
template = yaml_parse(open("template.yaml").read())
template["Resources"]["SageStreamFunction"]["Properties"]["CodeUri"] = "s3://bucket/artifact.zip"  # as packaged
pseudo = PseudoParameterValues(region="us-east-1", account_id="123456789012", partition="aws")
expanded = process_template(template, parameters, pseudo)
expanded["Transform"] = "AWS::Serverless-2016-10-31"


class Policies:
    def load(self):
        return {"AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"}


print(json.dumps(transform(expanded, parameters, Policies())))
"""


def _deployed(sam: Path, **parameters: object) -> dict[str, Any]:
    resources: dict[str, Any] = _run_in_sam(
        sam, _BOTH_TRANSFORMS, json.dumps({"EndpointName": "my-llm", **parameters})
    )["Resources"]
    return resources


def _of_type(resources: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in resources.values() if r["Type"] == kind]


def test_managed_instances_run_the_live_alias_on_a_capacity_provider_with_json_logs(sam: Path) -> None:
    resources = _deployed(
        sam,
        ManagedInstances="true",
        SubnetIds=[_NETWORK["SubnetIds"]],
        SecurityGroupIds=[_NETWORK["SecurityGroupIds"]],
        VpcId="vpc-0abc",
    )
    function = resources["SageStreamFunction"]["Properties"]
    assert function["CapacityProviderConfig"] == {
        "LambdaManagedInstancesCapacityProviderConfig": {
            "CapacityProviderArn": {"Fn::GetAtt": ["SageStreamCapacityProvider", "Arn"]},
            "PerExecutionEnvironmentMaxConcurrency": 64,
            "ExecutionEnvironmentMemoryGiBPerVCpu": 2,
        }
    }
    assert function["LoggingConfig"]["LogFormat"] == "JSON", "Lambda Managed Instances take JSON logs only"
    (alias,) = _of_type(resources, "AWS::Lambda::Alias")
    assert alias["Properties"]["Name"] == "live"
    (url,) = _of_type(resources, "AWS::Lambda::Url")
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": "SageStreamFunctionAliaslive"}, "the URL is the alias's"
    assert url["Properties"]["InvokeMode"] == "RESPONSE_STREAM"
    provider = resources["SageStreamCapacityProvider"]
    assert provider["Properties"]["VpcConfig"] == {
        "SubnetIds": [_NETWORK["SubnetIds"]],
        "SecurityGroupIds": [_NETWORK["SecurityGroupIds"]],
    }
    assert provider["Properties"]["InstanceRequirements"] == {"Architectures": ["arm64"]}  # the artifact's
    operator = resources["CapacityProviderOperatorRole"]["Properties"]
    assert operator["ManagedPolicyArns"] == ["arn:aws:iam::aws:policy/AWSLambdaManagedEC2ResourceOperator"]
    assert "Policies" not in operator, "the operator role has AWS's managed policy and nothing more"
    (endpoint,) = _of_type(resources, "AWS::EC2::VPCEndpoint")
    assert endpoint["Properties"]["ServiceName"] == "com.amazonaws.us-east-1.sagemaker.runtime"
    assert endpoint["Properties"]["PrivateDnsEnabled"] is True  # boto3's usual host name resolves to it


@pytest.mark.parametrize("managed", ["false", "true"])
@pytest.mark.parametrize("mode", ["iam", "api_key", "jwt", "none"])
def test_an_open_url_is_granted_to_anyone_on_what_the_url_is_on_and_an_iam_url_to_no_one(
    sam: Path, managed: str, mode: str
) -> None:
    """Both transforms, as CloudFormation runs them: LanguageExtensions makes the AuthType a literal, and SAM
    grants an open URL to anyone on what the URL is on (the alias on Managed Instances: a grant on the
    unqualified function would leave the alias's URL answering 403). The template writes no grant itself: it
    used to, with SAM's own logical ids, and no open-mode stack transformed."""
    network = {"SubnetIds": [_NETWORK["SubnetIds"]], "SecurityGroupIds": [_NETWORK["SecurityGroupIds"]]}
    modes = {"api_key": {"ApiKeysParameter": "keys"}, "jwt": {"CreateUserPool": "true"}}
    resources = _deployed(sam, ManagedInstances=managed, AuthMode=mode, **modes.get(mode, {}), **network)
    target = "SageStreamFunctionAliaslive" if managed == "true" else "SageStreamFunction"
    (url,) = _of_type(resources, "AWS::Lambda::Url")
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": target}
    assert url["Properties"]["AuthType"] == ("AWS_IAM" if mode == "iam" else "NONE")
    # The REST front's grant to API Gateway stays under its condition (Front RestApi), false here.
    permissions = [p for p in _of_type(resources, "AWS::Lambda::Permission") if p.get("Condition") != "RestFront"]
    if mode == "iam":
        assert permissions == []  # signed callers only: no public grant at all
        return
    assert {p["Properties"]["Action"] for p in permissions} == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    for permission in permissions:
        assert permission["Properties"]["FunctionName"] == {"Ref": target}, (managed, permission)
        assert permission["Properties"]["Principal"] == "*"
    invoke = next(p for p in permissions if p["Properties"]["Action"] == "lambda:InvokeFunction")
    assert invoke["Properties"]["InvokedViaFunctionUrl"] is True  # only through the URL, never a direct Invoke
    url_grant = next(p for p in permissions if p["Properties"]["Action"] == "lambda:InvokeFunctionUrl")
    assert url_grant["Properties"]["FunctionUrlAuthType"] == "NONE"


def test_sam_validate_lint_is_clean_with_managed_instances_and_an_open_url(sam: Path, tmp_path: Path) -> None:
    defaults = {"ManagedInstances": "true", **_NETWORK, "AuthMode": "api_key", "ApiKeysParameter": "keys"}
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), defaults))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr


def test_classic_lambda_is_the_default_and_has_no_capacity_provider_alias_or_vpc(sam: Path) -> None:
    resources = _deployed(sam)
    function = resources["SageStreamFunction"]["Properties"]
    assert "CapacityProviderConfig" not in function and "VpcConfig" not in function
    assert function["LoggingConfig"]["LogFormat"] == "Text"
    assert _of_type(resources, "AWS::Lambda::Alias") == []
    (url,) = _of_type(resources, "AWS::Lambda::Url")
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": "SageStreamFunction"}
    for name in ("SageStreamCapacityProvider", "CapacityProviderOperatorRole", "SageMakerRuntimeEndpoint"):
        assert resources[name]["Condition"] in {"OnManagedInstances", "MakesOperatorRole", "MakesSageMakerEndpoint"}
