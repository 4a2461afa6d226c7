"""``Quotas`` through both transforms as CloudFormation runs them: one on-demand table laid out as
sagestream.quotas and sagestream_local.dynamodb use it, made only with quotas, and a role that may do on it
exactly what the function does (every DynamoDB call of a reserve, a refusal's give-back and a settle, recorded
against moto's server on loopback), nothing else."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sagestream.errors import APIError
from sagestream.quotas import DynamoQuotas, Subject, parse_policy
from sagestream.settings import SETTING
from sagestream_local.dynamodb import LocalDynamoDB
from tests.cfn import load_template
from tests.deploy.conftest import ROOT, sam_lint, with_defaults
from tests.deploy.test_template import _deployed, _run_in_sam, _statements
from tests.deploy.test_template_settings import Feeds

POLICY = "tokens_per_minute=20000 requests_per_minute=30"
# IAM's action for each DynamoDB operation the function may send (any other is a KeyError: the test then says so).
IAM_ACTION = {"UpdateItem": "dynamodb:UpdateItem", "PutItem": "dynamodb:PutItem", "DeleteItem": "dynamodb:DeleteItem"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def local_table() -> Iterator[tuple[LocalDynamoDB, dict[str, Any]]]:
    """The quotas table as ``make run`` makes it (moto on 127.0.0.1), and its description."""
    with LocalDynamoDB() as db:
        yield db, db.client().describe_table(TableName=db.quotas_table)["Table"]


def _role_statements(resources: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement the stack grants: the function role's inline policies and every RolePolicy (all of them
    on that role in the template), whatever their conditions."""
    role = resources["SageStreamFunctionRole"]["Properties"]
    statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for resource in resources.values():
        if resource["Type"] in ("AWS::IAM::RolePolicy", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            statements += resource["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _mentions(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        return any(k == name or _mentions(v, name) for k, v in value.items())
    if isinstance(value, list):
        return any(_mentions(v, name) for v in value)
    return bool(value == name)


# --- the parameters and the settings they feed ------------------------------------------------------------


def test_the_parameters_are_the_settings_with_the_settings_defaults_and_choices(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    assert SETTING["QUOTAS"].template_parameter == "Quotas"
    assert SETTING["QUOTAS_UNAVAILABLE"].template_parameter == "QuotasUnavailable"
    assert SETTING["QUOTAS_TABLE"].template_parameter is None  # the template's own table, no parameter
    assert parameters["Quotas"]["Type"] == "String" and parameters["Quotas"]["Default"] == ""
    assert "AllowedValues" not in parameters["Quotas"]  # words or JSON: the function checks it at init
    unavailable = parameters["QuotasUnavailable"]
    assert unavailable["Type"] == "String" and unavailable["Default"] == SETTING["QUOTAS_UNAVAILABLE"].default
    assert tuple(unavailable["AllowedValues"]) == SETTING["QUOTAS_UNAVAILABLE"].choices == ("closed", "open")
    # both forms the description names parse as the function parses them
    assert parse_policy(POLICY).default.get("tokens_per_minute") == 20000
    assert parse_policy('{"default": {"tokens_per_day": 5}}').default.get("tokens_per_day") == 5


def test_the_variables_are_wired_to_their_parameters_and_the_table(template: dict[str, Any]) -> None:
    variables = template["Resources"]["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["QUOTAS"] == {"Ref": "Quotas"}
    assert variables["QUOTAS_UNAVAILABLE"] == {"Ref": "QuotasUnavailable"}
    assert variables["QUOTAS_TABLE"] == {"Fn::If": ["CountsQuotas", {"Ref": "QuotasTable"}, ""]}
    table = Feeds(template, variables["QUOTAS_TABLE"])
    assert (table.direct, table.through_conditions(template), table.literals) == (set(), {"Quotas"}, [""])


def test_the_condition_is_quotas_set_and_not_the_usage_plans(template: dict[str, Any]) -> None:
    conditions = template["Conditions"]
    assert conditions["CountsQuotas"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "Quotas"}, ""]}]}
    assert conditions["HasQuota"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "QuotaPerDay"}, "0"]}]}  # the REST front's


# --- the table ------------------------------------------------------------------------------------------


def test_the_table_and_its_output_exist_only_with_quotas(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    assert resources["QuotasTable"]["Type"] == "AWS::DynamoDB::Table"
    assert resources["QuotasTable"]["Condition"] == "CountsQuotas"
    assert template["Outputs"]["QuotasTable"] == {
        "Condition": "CountsQuotas",
        "Description": template["Outputs"]["QuotasTable"]["Description"],
        "Value": {"Ref": "QuotasTable"},
    }
    # Nothing else names the table but what is under the same condition: the function's variable (an !If on
    # it), the grant and the output.
    for name, resource in resources.items():
        if name != "SageStreamFunction" and _mentions(resource, "QuotasTable"):
            assert resource.get("Condition") == "CountsQuotas", name


def test_no_table_and_no_quotas_by_default(sam: Path) -> None:
    resources = _deployed(sam)
    # Left to CloudFormation's condition, false with the defaults: no table is made.
    assert resources["QuotasTable"]["Condition"] == "CountsQuotas"
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert (variables["QUOTAS"], variables["QUOTAS_TABLE"], variables["QUOTAS_UNAVAILABLE"]) == ("", "", "closed")
    assert not [s for s in _role_statements(resources) if _mentions(s, "QuotasTable")]
    SETTING["QUOTAS"].parse(variables["QUOTAS"])  # the default is a value the function accepts: no quotas


def test_the_table_is_the_local_ones_on_demand_with_ttl_on_what_the_function_writes(
    sam: Path, local_table: tuple[LocalDynamoDB, dict[str, Any]]
) -> None:
    db, local = local_table
    resources = _deployed(sam, Quotas=POLICY)
    table = resources["QuotasTable"]
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Delete", "Delete")
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == (
        resources["ResponsesTable"]["DeletionPolicy"],
        resources["ResponsesTable"]["UpdateReplacePolicy"],
    )
    properties = table["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST" == local["BillingModeSummary"]["BillingMode"]
    assert properties["KeySchema"] == local["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert (
        properties["AttributeDefinitions"]
        == local["AttributeDefinitions"]
        == [{"AttributeName": "pk", "AttributeType": "S"}]
    )
    assert "GlobalSecondaryIndexes" not in properties and "LocalSecondaryIndexes" not in properties
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert properties["SSESpecification"] == {"SSEEnabled": False}  # DynamoDB's own key, as the responses table's
    # The TTL attribute is the one the function sets, as epoch seconds after the window.
    quotas = DynamoQuotas(db.quotas_table, parse_policy(POLICY), db.client())
    reservation = quotas.reserve(Subject("key:ttl", ("key:ttl",)), 10, 20, "req-ttl", now=1_800_000_000.0)
    assert reservation is not None
    ((pk, _),) = reservation.items
    item = db.client().get_item(TableName=db.quotas_table, Key={"pk": {"S": pk}})["Item"]
    assert int(item[properties["TimeToLiveSpecification"]["AttributeName"]]["N"]) > 1_800_000_000


def test_the_variables_with_quotas(sam: Path) -> None:
    resources = _deployed(sam, Quotas=POLICY, QuotasUnavailable="open")
    variables = resources["SageStreamFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["QUOTAS"] == POLICY
    assert variables["QUOTAS_TABLE"] == {"Ref": "QuotasTable"}
    assert variables["QUOTAS_UNAVAILABLE"] == "open"


# --- the role -------------------------------------------------------------------------------------------


def _what_the_function_calls(db: LocalDynamoDB) -> set[str]:
    """The IAM actions of every DynamoDB request a reserve, a refused reserve (its give-back) and a settle send."""
    client = db.client()
    sent: list[tuple[str, dict[str, Any]]] = []
    client.meta.events.register(
        "before-parameter-build.dynamodb", lambda model, params, **_: sent.append((model.name, dict(params)))
    )
    policy = parse_policy("tokens_per_minute=1000 requests_per_minute=10 tokens_per_day=50 tokens_per_month=9000")
    quotas = DynamoQuotas(db.quotas_table, policy, client)
    now = 1_800_000_000.0
    first = quotas.reserve(Subject("key:iam", ("key:iam",)), 20, 30, "req-1", now=now)
    assert first is not None and len(first.items) == 3  # the minute, the day and the month
    with pytest.raises(APIError):  # the day has no room left: the minute's and the month's are given back
        quotas.reserve(Subject("key:iam", ("key:iam",)), 20, 30, "req-2", now=now)
    assert quotas.settle(first.items, "req-1", used=7) == 1
    # 3 reserved; 3 asked at once, the day refusing and the other two given back; a settle of each of the 3 items
    operations = [name for name, _ in sent]
    assert operations == ["UpdateItem"] * 11, operations
    actions: set[str] = set()
    for name, params in sent:
        assert params["TableName"] == db.quotas_table
        actions.add(IAM_ACTION[name])
    return actions


def test_the_role_may_do_on_the_table_exactly_what_the_function_does(
    sam: Path, local_table: tuple[LocalDynamoDB, dict[str, Any]]
) -> None:
    db, _ = local_table
    resources = _deployed(sam, Quotas=POLICY)
    statements = _role_statements(resources)
    on_table = [s for s in statements if _mentions(s, "QuotasTable")]
    (grant,) = on_table
    assert grant["Sid"] == "CountQuotas" and grant["Effect"] == "Allow" and "Condition" not in grant
    assert grant["Resource"] == {"Fn::GetAtt": ["QuotasTable", "Arn"]}  # the table, not its indexes or streams
    assert _actions(grant) == ["dynamodb:UpdateItem"]
    assert set(_actions(grant)) == _what_the_function_calls(db)
    # and with quotas alone, that is the role's only DynamoDB grant
    assert [s for s in statements if any(a.startswith("dynamodb:") for a in _actions(s))] == [grant]


def test_with_the_responses_store_too_each_table_keeps_its_own_grant(sam: Path) -> None:
    resources = _deployed(sam, Quotas=POLICY, ResponsesStore="dynamodb")
    dynamo = [s for s in _role_statements(resources) if any(a.startswith("dynamodb:") for a in _actions(s))]
    by_table = {s["Resource"]["Fn::GetAtt"][0]: s for s in dynamo}
    assert sorted(by_table) == ["QuotasTable", "ResponsesTable"] and len(dynamo) == 2
    assert _actions(by_table["QuotasTable"]) == ["dynamodb:UpdateItem"]
    assert not _mentions(by_table["ResponsesTable"], "QuotasTable")


def test_the_grant_is_conditional_on_quotas(template: dict[str, Any]) -> None:
    function = template["Resources"]["SageStreamFunction"]["Properties"]
    (count,) = [(c, s) for c, s in _statements(function) if _mentions(s, "QuotasTable")]
    condition, statement = count
    assert condition == "CountsQuotas" and statement["Sid"] == "CountQuotas"


def test_sam_validate_lint_is_clean_with_quotas_on(sam: Path, tmp_path: Path) -> None:
    defaults = {"Quotas": POLICY, "QuotasUnavailable": "open", "ResponsesStore": "dynamodb"}
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), defaults))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr


# SAM CLI's own reading of --parameter-overrides: a value with spaces needs quotes inside it.
_OVERRIDES = """
import json, sys
from samcli.cli.types import CfnParameterOverridesType

print(json.dumps(CfnParameterOverridesType().convert(tuple(sys.argv[1:]), None, None)))
"""


def test_the_deploy_pages_command_gives_sam_the_whole_policy(sam: Path) -> None:
    page = (ROOT / "docs" / "deploy.md").read_text()
    section = page.split("\n## Quotas\n", 1)[1].split("\n## ", 1)[0]
    command = section.split("```sh\n", 1)[1].split("```", 1)[0]
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["sam", "deploy"]
    overrides = words[words.index("--parameter-overrides") + 1 :]
    parsed = _run_in_sam(sam, _OVERRIDES, *overrides)
    assert parsed["Quotas"] == POLICY
    limits = parse_policy(parsed["Quotas"]).default
    assert (limits.get("tokens_per_minute"), limits.get("requests_per_minute")) == (20000, 30)
    # the form the page warns of: SAM keeps the first word only
    assert _run_in_sam(sam, _OVERRIDES, f"Quotas={POLICY}")["Quotas"] == "tokens_per_minute=20000"
