"""``ResponsesStore=dynamodb`` through both transforms as CloudFormation runs them: a table laid out as
sagestream.protocols.responses.store reads it, and a role that may do only what the store does, on that table."""

from __future__ import annotations

from pathlib import Path

from tests.cfn import load_template
from tests.deploy.conftest import ROOT, sam_lint, with_defaults
from tests.deploy.test_template import _deployed, _statements


def test_no_store_by_default(sam: Path) -> None:
    resources = _deployed(sam)
    # Left to CloudFormation's condition, false with the defaults: no table is made (nor the quotas' one).
    tables = {name: r["Condition"] for name, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"}
    assert tables == {"ResponsesTable": "StoresResponses", "QuotasTable": "CountsQuotas"}
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["RESPONSES_STORE"] == "none" and variables["RESPONSES_TABLE"] == ""


def test_the_store_is_one_on_demand_table_with_ttl_that_the_function_may_only_read_write_and_delete(
    sam: Path,
) -> None:
    resources = _deployed(sam, ResponsesStore="dynamodb", ResponsesTtlDays=7)
    table = resources["ResponsesTable"]  # the quotas' table is test_template_quotas.py's
    properties = table["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["KeySchema"] == [
        {"AttributeName": "id", "KeyType": "HASH"},
        {"AttributeName": "part", "KeyType": "RANGE"},
    ]
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["RESPONSES_STORE"] == "dynamodb" and variables["RESPONSES_TTL_DAYS"] == 7
    assert variables["RESPONSES_TABLE"] == {"Ref": "ResponsesTable"}
    policies = resources["SageStreamFunctionRole"]["Properties"]["Policies"]
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    dynamo = [s for s in statements if any(str(a).startswith("dynamodb:") for a in s["Action"])]
    (keep,) = dynamo
    assert sorted(keep["Action"]) == [
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    ]
    assert keep["Resource"] == {"Fn::GetAtt": ["ResponsesTable", "Arn"]}


def test_with_the_store_the_function_may_invoke_itself_and_nothing_else(sam: Path) -> None:
    for versions, target in (
        ({}, {"Fn::GetAtt": ["SageStreamFunction", "Arn"]}),
        ({"SnapStart": "true"}, {"Ref": "SageStreamFunctionAliaslive"}),  # what runs is the alias "live"
    ):
        resources = _deployed(sam, ResponsesStore="dynamodb", **versions)
        grant = resources["BackgroundResponsesGrant"]
        assert grant["Condition"] == "StoresResponses"
        assert grant["Properties"]["RoleName"] == {"Ref": "SageStreamFunctionRole"}
        (statement,) = grant["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Action"] == "lambda:InvokeFunction" and statement["Resource"] == target
        policies = resources["SageStreamFunctionRole"]["Properties"]["Policies"]
        assert not [s for p in policies for s in p["PolicyDocument"]["Statement"] if "lambda:" in str(s["Action"])]


def test_a_customer_key_encrypts_the_table_and_is_usable_only_through_dynamodb(sam: Path) -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    resources = _deployed(sam, ResponsesStore="dynamodb", ResponsesKmsKeyArn=key)
    table = resources["ResponsesTable"]
    assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key}
    policies = resources["SageStreamFunctionRole"]["Properties"]["Policies"]
    (use,) = [
        s
        for p in policies
        for s in p["PolicyDocument"]["Statement"]
        if s.get("Sid") == "UseTheResponsesKeyThroughDynamoDB"
    ]
    assert use["Resource"] == key
    assert use["Condition"] == {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}


def test_the_store_statements_are_conditional_on_the_store() -> None:
    function = load_template(ROOT / "template.yaml")["Resources"]["SageStreamFunction"]["Properties"]
    store = [
        (c, s)
        for c, s in _statements(function)
        if s.get("Sid") in ("KeepResponses", "UseTheResponsesKeyThroughDynamoDB")
    ]
    assert [c for c, _ in store] == ["StoresResponses", "ResponsesTableNeedsKms"]


def test_sam_validate_lint_is_clean_with_the_store_on(sam: Path, tmp_path: Path) -> None:
    defaults = {
        "SnapStart": "true",
        "ResponsesStore": "dynamodb",
        "ResponsesKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/abc",
    }
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), defaults))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_background_runs_event_waits_no_longer_than_a_queued_run_is_believed(sam: Path) -> None:
    from sagestream.protocols.responses.runs import MAX_QUEUED_S

    resources = _deployed(sam, ResponsesStore="dynamodb")
    configs = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"]
    (config,) = configs
    assert config["MaximumRetryAttempts"] == 2
    assert config["MaximumEventAgeInSeconds"] + 60 <= MAX_QUEUED_S
