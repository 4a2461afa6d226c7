"""``SnapStart=true`` through both transforms as CloudFormation runs them: published versions with SnapStart, the
URL (and an open URL's public grants) on the alias, and nothing of it by default."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.conftest import ROOT, sam_lint, with_defaults
from tests.deploy.test_template import _deployed, _of_type


def test_snapstart_publishes_versions_and_puts_the_url_on_the_alias(sam: Path) -> None:
    resources = _deployed(sam, SnapStart="true", AuthMode="none")
    assert resources["SageStreamFunction"]["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    (alias,) = _of_type(resources, "AWS::Lambda::Alias")
    assert alias["Properties"]["Name"] == "live"
    (url,) = _of_type(resources, "AWS::Lambda::Url")
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": "SageStreamFunctionAliaslive"}
    for permission in _of_type(resources, "AWS::Lambda::Permission"):
        assert permission["Properties"]["FunctionName"] == {"Ref": "SageStreamFunctionAliaslive"}


def test_without_snapstart_there_is_none(sam: Path) -> None:
    assert "SnapStart" not in _deployed(sam)["SageStreamFunction"]["Properties"]


def test_sam_validate_lint_is_clean_with_snapstart_on(sam: Path, tmp_path: Path) -> None:
    on = tmp_path / "template.yaml"
    on.write_text(with_defaults((ROOT / "template.yaml").read_text(), {"SnapStart": "true"}))
    result = sam_lint(sam, on)
    assert result.returncode == 0, result.stdout + result.stderr
