"""Front=RestApi: an API Gateway REST API streaming the function (issue 36), through both transforms as
CloudFormation runs them, for every front, AuthMode and compute type; and cfn-lint on the REST front's options.

The streaming integration's shape is AWS's ("Set up a Lambda proxy integration with payload response streaming
in API Gateway"): an AWS_PROXY integration with ResponseTransferMode STREAM whose URI is the 2021-11-15
InvokeWithResponseStream path, ``.../functions/<arn>/response-streaming-invocations``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cfn import load_template
from tests.deploy.conftest import ROOT, sam_lint, with_defaults
from tests.deploy.test_template import _BOTH_TRANSFORMS, _NETWORK, _run_in_sam

MODES = {"api_key": {"ApiKeysParameter": "keys"}, "jwt": {"CreateUserPool": "true"}}
COMPUTE = {
    "classic": {},
    "snapstart": {"SnapStart": "true"},
    "managed": {
        "ManagedInstances": "true",
        "SubnetIds": [_NETWORK["SubnetIds"]],
        "SecurityGroupIds": [_NETWORK["SecurityGroupIds"]],
    },
}


def _holds(condition: Any, conditions: dict[str, Any]) -> bool:
    """A condition of the expanded template, whose parameters LanguageExtensions has already put in."""
    if isinstance(condition, dict) and "Condition" in condition:
        return _holds(conditions[condition["Condition"]], conditions)
    ((name, args),) = condition.items()
    if name == "Fn::Equals":
        return str(args[0]) == str(args[1])
    if name == "Fn::Not":
        return not _holds(args[0], conditions)
    if name == "Fn::And":
        return all(_holds(a, conditions) for a in args)
    if name == "Fn::Or":
        return any(_holds(a, conditions) for a in args)
    raise AssertionError(f"a condition this test cannot read: {condition}")


def deployed(**parameters: Any) -> dict[str, Any]:
    """The resources CloudFormation would create: both transforms, then the resources whose condition holds."""
    from tests.deploy.conftest import SAM

    out = _run_in_sam(SAM, _BOTH_TRANSFORMS, json.dumps({"EndpointName": "my-llm", **parameters}))
    conditions = out.get("Conditions", {})
    resources = {
        name: resource
        for name, resource in out["Resources"].items()
        if "Condition" not in resource or _holds({"Condition": resource["Condition"]}, conditions)
    }
    outputs = {
        name: output
        for name, output in out["Outputs"].items()
        if "Condition" not in output or _holds({"Condition": output["Condition"]}, conditions)
    }
    return {"Resources": resources, "Outputs": outputs}


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


@pytest.mark.parametrize("compute", sorted(COMPUTE))
@pytest.mark.parametrize("mode", ["iam", "api_key", "jwt", "none"])
@pytest.mark.parametrize("front", ["FunctionUrl", "RestApi"])
def test_each_front_auth_mode_and_compute_type_transforms_to_one_front(front: str, mode: str, compute: str) -> None:
    stack = deployed(Front=front, AuthMode=mode, **MODES.get(mode, {}), **COMPUTE[compute])
    resources = stack["Resources"]
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    publishes = compute != "classic"
    target = {"Ref": "SageStreamFunctionAliaslive"} if publishes else {"Fn::GetAtt": ["SageStreamFunction", "Arn"]}
    urls = of_type(resources, "AWS::Lambda::Url")
    methods = of_type(resources, "AWS::ApiGateway::Method")
    keyed_by_gateway = front == "RestApi" and mode == "api_key"
    assert variables["API_KEY_SOURCE"] == ("gateway" if keyed_by_gateway else "function")
    assert variables["API_KEYS_PARAMETER"] == ("keys" if mode == "api_key" and front == "FunctionUrl" else "")
    if front == "FunctionUrl":
        assert len(urls) == 1 and not methods and not of_type(resources, "AWS::ApiGateway::RestApi")
        assert "FunctionUrl" in stack["Outputs"] and "RestApiUrl" not in stack["Outputs"]
        return
    # No URL to walk around API Gateway's key check, WAF and throttling, and nothing public on the function.
    assert urls == {}
    assert "FunctionUrl" not in stack["Outputs"] and "RestApiUrl" in stack["Outputs"]
    (grant,) = of_type(resources, "AWS::Lambda::Permission").values()
    assert grant["Properties"]["Principal"] == "apigateway.amazonaws.com"
    assert grant["Properties"]["Action"] == "lambda:InvokeFunction"
    assert grant["Properties"]["FunctionName"] == target
    assert set(methods) == {"RestApiRootMethod", "RestApiProxyMethod"}
    for method in methods.values():
        props = method["Properties"]
        assert props["HttpMethod"] == "ANY"
        assert props["AuthorizationType"] == ("AWS_IAM" if mode == "iam" else "NONE")
        assert props["ApiKeyRequired"] is keyed_by_gateway
        integration = props["Integration"]
        assert (integration["Type"], integration["IntegrationHttpMethod"]) == ("AWS_PROXY", "POST")
        assert integration["ResponseTransferMode"] == "STREAM"
        assert integration["TimeoutInMillis"] == 900000  # STREAM's ceiling, 15 minutes
        uri = json.dumps(integration["Uri"])
        assert ":lambda:path/2021-11-15/functions/" in uri and uri.endswith('/response-streaming-invocations"')
        assert ("SageStreamFunctionAliaslive" if publishes else "SageStreamFunction.Arn") in uri
    assert resources["RestApiProxyResource"]["Properties"]["PathPart"] == "{proxy+}"
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}  # a 5-minute idle timeout, not 30 s
    plans = of_type(resources, "AWS::ApiGateway::UsagePlan")
    assert bool(plans) is keyed_by_gateway
    assert not of_type(resources, "AWS::ApiGateway::DomainName")
    assert not of_type(resources, "AWS::WAFv2::WebACLAssociation")


def test_the_usage_plan_throttles_each_key_and_quotas_it_when_asked() -> None:
    resources = deployed(Front="RestApi", AuthMode="api_key", ThrottleRate=5, ThrottleBurst=7, QuotaPerDay=1000)[
        "Resources"
    ]
    (plan,) = of_type(resources, "AWS::ApiGateway::UsagePlan").values()
    assert plan["Properties"]["Throttle"] == {"RateLimit": 5, "BurstLimit": 7}
    assert plan["Properties"]["Quota"] == {"Limit": 1000, "Period": "DAY"}
    assert plan["Properties"]["ApiStages"] == [{"ApiId": {"Ref": "RestApi"}, "Stage": "api"}]
    (key,) = of_type(resources, "AWS::ApiGateway::UsagePlanKey").values()
    assert key["Properties"]["KeyType"] == "API_KEY"
    no_quota = deployed(Front="RestApi", AuthMode="api_key")["Resources"]
    (plan,) = of_type(no_quota, "AWS::ApiGateway::UsagePlan").values()
    assert "Quota" not in plan["Properties"]


def test_a_custom_domain_and_a_web_acl_front_the_stage() -> None:
    certificate = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d"
    acl = "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/llm/0a1b2c3d"
    stack = deployed(
        Front="RestApi", StageName="prod", DomainName="llm.example.com", CertificateArn=certificate, WebAclArn=acl
    )
    resources = stack["Resources"]
    (domain,) = of_type(resources, "AWS::ApiGateway::DomainName").values()
    assert domain["Properties"]["DomainName"] == "llm.example.com"
    assert domain["Properties"]["RegionalCertificateArn"] == certificate
    (mapping,) = of_type(resources, "AWS::ApiGateway::BasePathMapping").values()
    assert "BasePath" not in mapping["Properties"]  # the stage at the domain's root: https://llm.example.com/v1/...
    (association,) = of_type(resources, "AWS::WAFv2::WebACLAssociation").values()
    assert association["Properties"]["WebACLArn"] == acl
    assert "/restapis/" in json.dumps(association["Properties"]["ResourceArn"])
    assert resources["RestApiStage"]["Properties"]["StageName"] == "prod"
    assert stack["Outputs"]["Url"]["Value"] == "https://llm.example.com/"
    assert {"RestApiDomainTarget", "RestApiDomainZone"} <= set(stack["Outputs"])


def _lint(sam: Path, tmp_path: Path, defaults: dict[str, str]) -> None:
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), defaults))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_validate_lint_is_clean_with_the_rest_front_and_all_its_options(sam: Path, tmp_path: Path) -> None:
    _lint(
        sam,
        tmp_path,
        {
            "Front": "RestApi",
            "AuthMode": "api_key",
            "DomainName": "llm.example.com",
            "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d",
            "WebAclArn": "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/llm/0a1b2c3d",
            "QuotaPerDay": "1000",
        },
    )


def test_sam_validate_lint_is_clean_with_the_rest_front_on_the_live_alias(sam: Path, tmp_path: Path) -> None:
    _lint(sam, tmp_path, {"Front": "RestApi", "AuthMode": "iam", "SnapStart": "true"})


def _value(term: Any, parameters: dict[str, str]) -> str:
    return parameters[term["Ref"]] if isinstance(term, dict) else str(term)


def _rule_holds(condition: Any, parameters: dict[str, str]) -> bool:
    """A Rules condition (Equals of parameters, Not, And, Or), as CloudFormation checks it before creating."""
    ((name, args),) = condition.items()
    if name == "Fn::Equals":
        return _value(args[0], parameters) == _value(args[1], parameters)
    if name == "Fn::Not":
        return not _rule_holds(args[0], parameters)
    if name in ("Fn::And", "Fn::Or"):
        results = [_rule_holds(a, parameters) for a in args]
        return all(results) if name == "Fn::And" else any(results)
    raise AssertionError(f"a rule this test cannot read: {condition}")


def broken_rules(**overrides: str) -> set[str]:
    template = load_template(ROOT / "template.yaml")
    parameters = {name: str(p.get("Default", "")) for name, p in template["Parameters"].items()} | overrides
    broken = set()
    for name, rule in template["Rules"].items():
        if "RuleCondition" in rule and not _rule_holds(rule["RuleCondition"], parameters):
            continue
        if any(not _rule_holds(a["Assert"], parameters) for a in rule["Assertions"] if "Fn::Join" not in json.dumps(a)):
            broken.add(name)
    return broken


CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d"


@pytest.mark.parametrize(
    ("overrides", "broken"),
    [
        ({"Front": "RestApi", "AuthMode": "api_key"}, set()),  # API Gateway holds the keys: no ApiKeysParameter
        ({"AuthMode": "api_key"}, {"ApiKeyModeNeedsKeys"}),
        ({"DomainName": "llm.example.com", "CertificateArn": CERT}, {"ADomainNeedsItsCertificate"}),  # no URL domain
        ({"Front": "RestApi", "DomainName": "llm.example.com"}, {"ADomainNeedsItsCertificate"}),
        ({"Front": "RestApi", "DomainName": "llm.example.com", "CertificateArn": CERT}, set()),
        ({"WebAclArn": "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/x/1"}, {"AWebAclNeedsTheRestFront"}),
    ],
)
def test_the_rest_fronts_options_are_refused_without_it(overrides: dict[str, str], broken: set[str]) -> None:
    """CloudFormation checks Rules before it creates anything; sam validate does not, so they are evaluated here."""
    assert broken_rules(**overrides) == broken


def test_the_chat_page_calls_the_api_relative_to_where_it_is_served() -> None:
    # Behind the REST front the page is served at https://<api>.execute-api.<region>.amazonaws.com/<stage>/ (the
    # Url output without a custom domain): a fetch of "/v1/models" leaves the stage out and gets API Gateway's
    # 403, where "v1/models" resolves under the stage. On a Function URL or a root-mapped domain both work.
    page = (ROOT / "src" / "sagestream" / "static" / "index.html").read_text()
    assert 'fetch("/v1/' not in page
