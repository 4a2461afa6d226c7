"""``sam build`` makes the artifact without Docker, compiled by python3.13, and that artifact serves a stream.

One build for the template's arm64 (inspected: contents, the wrapper's executable bit, every module's
bytecode, the size zipped as ``sam deploy`` zips it), and one for this machine's architecture, which is
imported under python3.13 from a re-timestamped copy (nothing compiled, nothing written) and runs a streamed
chat request under ``sagestream_local``, started through the exec wrapper as Lambda starts it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.util import cache_from_source
from pathlib import Path
from typing import Any

import pytest

from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack
from tests.client import request
from tests.deploy.conftest import ROOT, SAM_ENV, SAM_PYTHON, find_python313

MAX_ZIPPED_BYTES = 20 * 1000 * 1000
FUNCTION = "SageStreamFunction"
# ELF e_machine of the shared objects inside the wheels: the artifact must hold Lambda's, not this machine's.
ELF_MACHINE = {"arm64": 0xB7, "x86_64": 0x3E}


def build(sam: Path, build_dir: Path, arch: str) -> Path:
    """``sam build`` as `make build` runs it, for ``arch``; returns the function's artifact directory."""
    started = time.monotonic()
    result = subprocess.run(
        [str(sam), "build", "--build-in-source", "--build-dir", str(build_dir), "--template-file", "template.yaml"],
        cwd=ROOT,
        env={**SAM_ENV, "LAMBDA_ARCH": arch},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"sam build ({arch}) failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    print(f"sam build {arch}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return build_dir / FUNCTION


def machine_arch() -> str:
    return "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"


@pytest.fixture(scope="module")
def artifact(sam: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact for the template's own architecture (arm64), built once for this module."""
    return build(sam, tmp_path_factory.mktemp("sam-arm64"), "arm64")


@pytest.fixture(scope="module")
def zipped(artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact zipped by the SAM CLI's own packaging code, as `sam deploy` uploads it."""
    base = tmp_path_factory.mktemp("zip") / FUNCTION
    code = (
        "import sys; from samcli.lib.package.utils import make_zip_with_lambda_permissions as z; "
        "print(z(sys.argv[1], sys.argv[2]))"
    )
    out = subprocess.run(
        [str(SAM_PYTHON), "-c", code, str(base), str(artifact)], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def runtime_dependencies() -> dict[str, str]:
    """The pinned ``[project] dependencies`` of pyproject.toml: normalised name -> version."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(d.split("==", 1) for d in deps)
    return {re.sub(r"[-_.]+", "_", name).lower(): version for name, version in pins.items()}


def test_the_artifact_holds_the_package_the_wrapper_and_the_pinned_dependencies(artifact: Path) -> None:
    for name in (
        "__init__.py",
        "app.py",
        "lambda_runtime/__main__.py",
        "lambda_runtime/stream.py",
        "function_url.py",
        "py.typed",
    ):
        assert (artifact / "sagestream" / name).is_file(), name
    installed = dict(p.name.removesuffix(".dist-info").rsplit("-", 1) for p in artifact.glob("*.dist-info"))
    installed = {re.sub(r"[-_.]+", "_", name).lower(): version for name, version in installed.items()}
    for name, version in runtime_dependencies().items():
        assert installed.get(name) == version, f"{name}=={version} not in the artifact (found {installed.get(name)})"


def test_the_artifact_leaves_out_what_is_not_deployed(artifact: Path) -> None:
    names = {p.relative_to(artifact).as_posix() for p in artifact.rglob("*")}
    assert not [n for n in names if n.startswith(("sagestream_local", "tests", "bench", "events", ".venv"))]
    # Bytecode only as the build compiled it: next to its source, for CPython 3.13 (see the tests below).
    assert not [n for n in names if n.endswith(".pyc") and not n.endswith(".cpython-313.pyc")]
    assert not [n for n in names if ".egg-info" in n or n.startswith("bin/")]
    assert not (artifact / "template.yaml").exists() and not (artifact / "Makefile").exists()


def test_the_artifact_holds_no_pydantic(artifact: Path) -> None:
    # Request validation is msgspec's; pydantic's import and model building were most of init's own cost.
    shipped = {p.name.split("-")[0].lower() for p in artifact.iterdir()}
    assert not shipped & {"pydantic", "pydantic_core"}, sorted(shipped & {"pydantic", "pydantic_core"})


def test_the_exec_wrapper_is_an_executable_script(artifact: Path, zipped: Path) -> None:
    wrapper = artifact / "sagestream-bootstrap"
    assert wrapper.read_text().startswith("#!/bin/sh\n")
    assert os.stat(wrapper).st_mode & 0o111 == 0o111
    with zipfile.ZipFile(zipped) as zf:  # and it stays executable once zipped for Lambda
        assert (zf.getinfo("sagestream-bootstrap").external_attr >> 16) & 0o111 == 0o111


def test_the_artifact_is_at_most_20_mb_zipped(zipped: Path) -> None:
    size = zipped.stat().st_size
    print(f"artifact zipped: {size / 1e6:.2f} MB", file=sys.stderr)
    assert size <= MAX_ZIPPED_BYTES, f"{size} bytes zipped"


def test_the_wheels_are_for_lambda_arm64_not_this_machine(artifact: Path) -> None:
    objects = list(artifact.glob("msgspec/*.so"))
    assert objects, "msgspec's compiled core is missing"
    for so in objects:
        assert "cpython-313" in so.name, so.name
        e_machine = int.from_bytes(so.read_bytes()[18:20], "little")
        assert e_machine == ELF_MACHINE["arm64"], f"{so.name}: ELF machine {e_machine:#x}"


def test_every_module_shipped_has_its_unchecked_hash_bytecode_for_python313(artifact: Path) -> None:
    # The header of a .pyc (PEP 552): the interpreter's magic number, then flags: 0b01 is hash-based and
    # unchecked, the one kind Lambda's read-only, re-timestamped /var/task never finds stale.
    sources = sorted(artifact.rglob("*.py"))
    assert len(sources) > 400  # botocore, Powertools and the function
    magic = PYTHON313_MAGIC
    wrong = []
    for source in sources:
        pyc = Path(cache_from_source(str(source)).replace(f".{sys.implementation.cache_tag}.", ".cpython-313."))
        header = pyc.read_bytes()[:8] if pyc.exists() else b""
        if header[:4] != magic or int.from_bytes(header[4:8], "little") != 0b01:
            wrong.append(f"{source.relative_to(artifact)}: {header.hex() or 'no .pyc'}")
    assert not wrong, f"{len(wrong)} of {len(sources)} sources lack a 3.13 unchecked-hash .pyc: {wrong[:5]}"


def test_every_aws_service_the_function_calls_keeps_its_botocore_model(artifact: Path) -> None:
    # The build drops botocore's models of services the function never calls; a new client must be kept.
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "sagestream").glob("*.py"))
    services = set(re.findall(r"""\.(?:create_)?client\(\s*["']([a-z0-9-]+)["']""", source))
    if "SSMProvider" in source:
        services.add("ssm")
    if "SecretsProvider" in source:
        services.add("secretsmanager")
    assert "sagemaker-runtime" in services
    kept = {p.name for p in (artifact / "botocore" / "data").iterdir() if p.is_dir()}
    assert services <= kept, f"add {sorted(services - kept)} to BOTOCORE_SERVICES in the Makefile"


def _resolved(resolver: Any, prefix: str, region: str, fips: bool, dualstack: bool) -> object:
    """What botocore's endpoint resolver answers for one service, region and variant (a refusal included)."""
    try:
        return resolver.construct_endpoint(prefix, region, use_fips_endpoint=fips, use_dualstack_endpoint=dualstack)
    except Exception as exc:  # e.g. no dual-stack in an isolated partition: the same refusal is expected
        return type(exc).__name__


def test_the_artifact_keeps_botocores_endpoints_for_the_services_it_ships(artifact: Path) -> None:
    # The build trims botocore's endpoints.json (parsed whole by the first client) to the services it keeps.
    # It must stay exactly botocore's own for those, from the pinned botocore: a new botocore that changed
    # the file's shape, or a build that dropped a service or a partition's field, fails here.
    import botocore
    import botocore.loaders
    import botocore.regions

    assert runtime_dependencies()["botocore"] == botocore.__version__, "the dev venv's botocore is not the pinned one"
    data = artifact / "botocore" / "data"
    loader = botocore.loaders.Loader(extra_search_paths=[str(data)], include_default_search_paths=False)
    kept = [p.name for p in data.iterdir() if p.is_dir()]
    prefixes = {loader.load_service_model(name, "service-2")["metadata"]["endpointPrefix"] for name in kept}
    assert "runtime.sagemaker" in prefixes
    trimmed = json.loads((data / "endpoints.json").read_text())
    full = botocore.loaders.Loader(include_default_search_paths=True).load_data("endpoints")
    expected = json.loads(json.dumps(full))
    for partition in expected["partitions"]:
        partition["services"] = {k: v for k, v in partition["services"].items() if k in prefixes}
    assert trimmed == expected
    assert (data / "endpoints.json").stat().st_size < 100_000  # what the trim is for: the full file is 1.25 MB
    # Resolved through botocore itself, every region of every partition, each variant: the same endpoints.
    whole, kept_only = botocore.regions.EndpointResolver(full, True), botocore.regions.EndpointResolver(trimmed, True)
    compared = 0
    for partition in full["partitions"]:
        for region in partition["regions"]:
            for prefix in sorted(prefixes):
                for fips, dualstack in ((False, False), (True, False), (False, True), (True, True)):
                    assert _resolved(kept_only, prefix, region, fips, dualstack) == _resolved(
                        whole, prefix, region, fips, dualstack
                    ), (prefix, region, fips, dualstack)
                    compared += 1
    assert compared > 500


# --- the artifact, built for this machine, serving one streamed request ---------------------------------

PYTHON313 = find_python313()
# CPython 3.13's .pyc magic number (3571), as its importlib says; a constant so the static test needs no 3.13.
PYTHON313_MAGIC = (3571).to_bytes(2, "little") + b"\r\n"


@pytest.fixture(scope="module")
def native_artifact(sam: Path, artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if PYTHON313 is None:
        pytest.skip("no python3.13 on this machine (PATH or ~/.pyenv/versions/3.13*): the artifact needs one to run")
    if machine_arch() == "arm64":
        return artifact
    return build(sam, tmp_path_factory.mktemp("sam-native"), machine_arch())


def files_of(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.fixture
def artifact_function(native_artifact: Path) -> Iterator[tuple[str, set[str]]]:
    """The local Function URL in front of one runtime process started from the artifact by its wrapper, and
    the artifact's files before that process started."""
    assert PYTHON313 is not None
    env = {
        # As Lambda runs it: the wrapper gets the managed runtime's command line (which it must ignore) and
        # finds the package under LAMBDA_TASK_ROOT. python3 on PATH is the 3.13 the wheels were built for.
        "LAMBDA_TASK_ROOT": str(native_artifact),
        "PATH": f"{Path(PYTHON313).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": "",  # nothing from this checkout: the artifact alone
        "PYTHONNOUSERSITE": "1",
        "_HANDLER": "sagestream.app.handler",
        "PYTHONDONTWRITEBYTECODE": "",  # bytecode writing on, as on Lambda: the test sees whether any is due
    }
    before = files_of(native_artifact)
    command = [str(native_artifact / "sagestream-bootstrap"), "/var/lang/bin/python3.13", "/var/runtime/bootstrap.py"]
    scenario = Scenario(ttft_ms=5, cadence_ms=1, tokens=12)
    with LocalStack(
        port=0, concurrency=1, timeout_s=60, env=env, scenario=scenario, upstream="simulated", command=command
    ) as stack:
        yield stack.url, before


def test_the_artifact_imports_on_python313_with_nothing_else_on_the_path(native_artifact: Path) -> None:
    assert PYTHON313 is not None
    code = (
        "import sagestream.lambda_runtime, boto3, botocore, msgspec; "
        "print(sagestream.lambda_runtime.__file__, boto3.__file__)"
    )
    out = subprocess.run(
        [PYTHON313, "-S", "-c", code],  # -S: no site-packages, so every import must come from the artifact
        env={"PYTHONPATH": str(native_artifact), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(path.startswith(str(native_artifact)) for path in out.stdout.split()), out.stdout


def test_the_jwt_check_imports_from_the_artifact_with_its_compiled_cryptography(native_artifact: Path) -> None:
    """AUTH_MODE=jwt's imports (PyJWT, and cryptography's Rust core for the signatures) come with the artifact."""
    assert PYTHON313 is not None
    code = (
        "import sagestream.identity, jwt, cryptography.hazmat.bindings._rust as core; "
        "print(sagestream.identity.__file__, jwt.__file__, core.__file__)"
    )
    out = subprocess.run(
        [PYTHON313, "-S", "-c", code],
        env={"PYTHONPATH": str(native_artifact), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(path.startswith(str(native_artifact)) for path in out.stdout.split()), out.stdout


# Run by python3.13 -S in a copy of the artifact: what importing the function (as its init does) compiled from
# source, through the loader's one door for that, and whether bytecode writing was on.
IMPORT_PROBE = """
import importlib.machinery, json, sys
compiled = []
source_to_code = importlib.machinery.SourceFileLoader.source_to_code
def counted(self, data, path, *args, **kwargs):
    compiled.append(path)
    return source_to_code(self, data, path, *args, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = counted
import sagestream.lambda_runtime, sagestream.app
print(json.dumps({"compiled": compiled, "dont_write_bytecode": sys.dont_write_bytecode,
                  "modules": sum(1 for m in sys.modules.values() if getattr(m, "__cached__", None))}))
"""


def import_in_copy(artifact: Path, copy: Path) -> tuple[dict[str, object], set[str]]:
    """Import the function from ``copy`` of ``artifact``, every file re-timestamped as Lambda's /var/task is
    (a timestamp-checked .pyc would then be stale); what the probe saw, and the files the import added."""
    assert PYTHON313 is not None
    shutil.copytree(artifact, copy, symlinks=True)
    later = time.time() + 3600
    for path in copy.rglob("*"):
        os.utime(path, (later, later), follow_symlinks=False)
    before = files_of(copy)
    env = {
        "PYTHONPATH": str(copy),
        "PATH": os.environ.get("PATH", ""),
        "AWS_REGION": "us-east-1",  # both, as Lambda sets them (botocore reads the second)
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "SAGEMAKER_ENDPOINT_NAME": "probe",
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": "http://127.0.0.1:9",
    }
    out = subprocess.run(
        [PYTHON313, "-S", "-c", IMPORT_PROBE], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    added = files_of(copy) - before
    return json.loads(out.stdout.splitlines()[-1]), added


def test_importing_the_artifact_on_python313_compiles_nothing_and_writes_nothing(
    native_artifact: Path, tmp_path: Path
) -> None:
    seen, added = import_in_copy(native_artifact, tmp_path / "task")
    assert seen["dont_write_bytecode"] is False  # writing was allowed: nothing was written because nothing was due
    assert isinstance(seen["modules"], int) and seen["modules"] > 300
    assert seen["compiled"] == [] and added == set(), (seen["compiled"][:5], sorted(added)[:5])


def test_the_import_probe_sees_a_module_without_bytecode(native_artifact: Path, tmp_path: Path) -> None:
    # The check above can fail: with one .pyc gone, that module is compiled from source and its .pyc written.
    stripped = tmp_path / "stripped"
    shutil.copytree(native_artifact, stripped, symlinks=True)
    pyc = Path(
        cache_from_source(str(stripped / "sagestream" / "relay.py")).replace(
            f".{sys.implementation.cache_tag}.", ".cpython-313."
        )
    )
    pyc.unlink()
    seen, added = import_in_copy(stripped, tmp_path / "task")
    assert seen["compiled"] == [str(tmp_path / "task" / "sagestream" / "relay.py")]
    assert added == {"sagestream/__pycache__/" + pyc.name}


def test_a_chat_request_streams_through_the_built_artifact(
    artifact_function: tuple[str, set[str]], native_artifact: Path
) -> None:
    url, files_before = artifact_function
    response = request(
        url,
        "POST",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hello"}], "stream": True},
        timeout=60,
    )
    assert response.status == 200, response.body[:500]
    assert (response.header("content-type") or "").startswith("text/event-stream")
    events = response.data_events()
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert text.strip()
    assert len(response.chunks) > 3  # streamed as it came, not in one piece
    # Init and a first request (its lazy imports included) found every module compiled: nothing written.
    assert files_of(native_artifact) == files_before, sorted(files_of(native_artifact) - files_before)[:5]
