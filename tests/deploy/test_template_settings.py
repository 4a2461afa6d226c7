"""template.yaml against the declared settings (src/sagestream/settings/), as the CORS lists are checked against
src/sagestream_local/cors.py: every variable the template sets is a declared setting, fed by the parameter the
declaration names, and every value the template may pass is one the function accepts at init."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sagestream.settings import SETTING, SETTINGS, ConfigError
from tests.cfn import load_template
from tests.deploy.conftest import ROOT

# Lambda's own variable, not a setting of the function: it starts the streaming runtime (see the script).
NOT_SETTINGS = {"AWS_LAMBDA_EXEC_WRAPPER"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def variables(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]["SageStreamFunction"]["Properties"]["Environment"]["Variables"]  # type: ignore[no-any-return]


class Feeds:
    """What a variable's value expression is made of: parameters it takes as its value, conditions that choose
    between its branches, and the literal strings it may be."""

    def __init__(self, template: dict[str, Any], expression: Any) -> None:
        self.parameters = set(template["Parameters"])
        self.direct: set[str] = set()
        self.conditions: set[str] = set()
        self.literals: list[str] = []
        self._walk(expression)

    def _walk(self, value: Any) -> None:
        if isinstance(value, str):
            self.literals.append(value)
        elif isinstance(value, list):
            for item in value:
                self._walk(item)
        elif isinstance(value, dict):
            ((function, argument),) = value.items()
            if function == "Ref":
                if argument in self.parameters:
                    self.direct.add(argument)
            elif function == "Fn::If":
                condition, then, otherwise = argument
                self.conditions.add(condition)
                self._walk(then)
                self._walk(otherwise)
            elif function == "Fn::Sub":  # a string with ${Name} in it: not a literal the function gets as is
                self.direct |= set(re.findall(r"\$\{([A-Za-z0-9]+)\}", argument)) & self.parameters
            elif function == "Fn::Join":
                self._walk(argument[1])
            else:
                raise AssertionError(f"teach this test {function}")

    def through_conditions(self, template: dict[str, Any]) -> set[str]:
        """The parameters the conditions it branches on depend on."""
        found: set[str] = set()
        pending = list(self.conditions)
        while pending:
            for node in _nodes(template["Conditions"][pending.pop()]):
                if "Ref" in node and node["Ref"] in self.parameters:
                    found.add(node["Ref"])
                if "Condition" in node:
                    pending.append(node["Condition"])
        return found


def _nodes(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value, *(n for v in value.values() for n in _nodes(v))]
    if isinstance(value, list):
        return [n for v in value for n in _nodes(v)]
    return []


def test_every_variable_the_template_sets_is_a_declared_setting(variables: dict[str, Any]) -> None:
    undeclared = set(variables) - set(SETTING) - NOT_SETTINGS
    assert not undeclared, f"declare these in src/sagestream/settings/: {sorted(undeclared)}"


def test_each_declared_template_parameter_exists_and_feeds_its_setting(
    template: dict[str, Any], variables: dict[str, Any]
) -> None:
    for setting in SETTINGS:
        if setting.template_parameter is None:
            continue
        assert setting.template_parameter in template["Parameters"], setting.env
        assert setting.env in variables, f"{setting.template_parameter} is declared to set {setting.env}"
        feeds = Feeds(template, variables[setting.env])
        assert setting.template_parameter in feeds.direct | feeds.through_conditions(template), setting.env


def test_a_parameter_that_sets_a_variable_is_the_one_its_setting_names(
    template: dict[str, Any], variables: dict[str, Any]
) -> None:
    """No parameter feeds a variable behind the declaration's back (a renamed parameter, a second source)."""
    for name, expression in variables.items():
        if name in NOT_SETTINGS or name not in SETTING:  # an undeclared one fails the first test
            continue
        declared = SETTING[name].template_parameter
        assert Feeds(template, expression).direct <= ({declared} if declared else set()), name


def test_every_value_the_template_may_pass_is_accepted_at_init(
    template: dict[str, Any], variables: dict[str, Any]
) -> None:
    """A parameter's allowed values and default, and the template's own literals, parse as the setting says:
    a deployment the template lets through does not stop at init on a value it chose."""
    for name, expression in variables.items():
        if name in NOT_SETTINGS or name not in SETTING:  # an undeclared one fails the first test
            continue
        setting = SETTING[name]
        feeds = Feeds(template, expression)
        values = list(feeds.literals)
        for parameter in feeds.direct:
            spec = template["Parameters"][parameter]
            if spec["Type"] == "String":  # lists and numbers are joined or typed by CloudFormation
                values += [str(v) for v in spec.get("AllowedValues", [])] + [str(spec.get("Default", ""))]
        for value in values:
            setting.parse(value)  # raises ConfigError naming the setting and the rule


def test_the_checks_above_see_what_they_claim(template: dict[str, Any], variables: dict[str, Any]) -> None:
    # Tracing reaches POWERTOOLS_TRACE_DISABLED only through a condition; MODEL_ID is its parameter's value
    # unless MODELS is set; the page's client id parameter is named after the stack, by no parameter.
    tracing = Feeds(template, variables["POWERTOOLS_TRACE_DISABLED"])
    assert (tracing.direct, tracing.through_conditions(template), sorted(tracing.literals)) == (
        set(),
        {"Tracing"},
        ["false", "true"],
    )
    model_id = Feeds(template, variables["MODEL_ID"])
    assert model_id.direct == {"ModelId"} and {"Models", "ModelsParameter"} <= model_id.through_conditions(template)
    assert Feeds(template, variables["JWT_CLIENT_ID_PARAMETER"]).direct == set()
    # and a value the function refuses would fail the check of the values above
    with pytest.raises(ConfigError, match="PROMPT_TEMPLATE='alpaca'; expected one of chatml, llama3"):
        SETTING["PROMPT_TEMPLATE"].parse("alpaca")
