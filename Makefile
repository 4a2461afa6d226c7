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
PORT ?= 3000
EVENT ?= events/chat-stream.json

.PHONY: help install run test lint invoke

help:
	@echo "make run       serve the function locally on the simulated endpoint (PORT=$(PORT))"
	@echo "make test      run the whole test suite"
	@echo "make lint      ruff, mypy, sam validate --lint"
	@echo "make invoke    one event through a runtime process (EVENT=$(EVENT))"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "no python >= 3.11 found" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

# The SAM CLI pins its own boto3, so it lives in a virtual environment of its own.
$(SAM_VENV)/.installed:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q aws-sam-cli==1.170.0 cfn-lint==1.58.0
	@touch $@

run: install
	$(PY) -m sagestream_local --port $(PORT)

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

invoke: install
	$(PY) -m sagestream_local.invoke $(EVENT)
