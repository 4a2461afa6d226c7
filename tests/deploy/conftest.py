"""What the deploy tests share: the SAM CLI of ``.venv-sam`` and a python3.13 to run the artifact with."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAM = ROOT / ".venv-sam" / "bin" / "sam"
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
# The SAM CLI reports usage to AWS unless told not to; these tests talk to nothing but 127.0.0.1 and PyPI.
SAM_ENV = {**os.environ, "SAM_CLI_TELEMETRY": "0"}


def sam_lint(sam: Path, template: Path | str = "template.yaml") -> subprocess.CompletedProcess[str]:
    """``sam validate --lint`` (cfn-lint included) of ``template``, run from the repository's root."""
    return subprocess.run(
        [str(sam), "validate", "--lint", "--region", "us-east-1", "--template-file", str(template)],
        cwd=ROOT,
        env=SAM_ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def with_defaults(text: str, values: dict[str, str]) -> str:
    """The template's text with these parameters' defaults (each parameter must have a Default line): how a
    parameter's other value is validated, since ``sam validate`` takes no parameters."""
    for name, value in values.items():
        pattern = re.compile(rf"(^  {name}:\n(?:    .*\n)*?    Default: ).*$", re.MULTILINE)
        text, count = pattern.subn(lambda m, value=value: m[1] + f'"{value}"', text, count=1)
        assert count == 1, name
    return text


def find_python313() -> str | None:
    """A working python3.13, found as the Makefile finds one (a pyenv shim that answers with an error is not)."""
    candidates = [
        shutil.which("python3.13"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13"))),
    ]
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 13)"], capture_output=True, check=False
        )
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def sam() -> Path:
    if not SAM.exists():
        pytest.fail(f"{SAM} is missing: `make test` creates .venv-sam (aws-sam-cli, cfn-lint) before running pytest")
    return SAM
