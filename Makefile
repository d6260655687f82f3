# Orchestra: `make pipeline` materializes every asset on the embedded default; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
DVC_VENV := .venv-dvc
APT_PACKAGES := tesseract-ocr espeak-ng
APT_BINARIES := tesseract espeak-ng
export DAGSTER_HOME := $(CURDIR)/.dagster
export HF_HUB_OFFLINE := 1
export MLFLOW_ENABLE_TELEMETRY := false
export DO_NOT_TRACK := 1

.PHONY: setup system-deps pipeline test test-fast ui repro lint clean

setup: system-deps $(VENV)/.installed $(DVC_VENV)/.installed $(DAGSTER_HOME)/dagster.yaml .dvc/config

# Debian packages the tools need; installed when missing (as root), a clear message otherwise.
system-deps:
	@missing=""; for b in $(APT_BINARIES); do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages: $(APT_PACKAGES)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  else \
	    echo "error: missing$$missing; install the Debian packages '$(APT_PACKAGES)' (sudo apt-get install $(APT_PACKAGES))" >&2; exit 1; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# DVC lives in its own environment: it pins antlr4-python3-runtime 4.9, Dagster needs 4.13.
$(DVC_VENV)/.installed:
	@test -x $(DVC_VENV)/bin/python || $(PYTHON) -m venv $(DVC_VENV)
	$(DVC_VENV)/bin/pip install -q --disable-pip-version-check 'dvc==3.*'
	@touch $@

$(DAGSTER_HOME)/dagster.yaml:
	@mkdir -p $(DAGSTER_HOME)
	@printf 'telemetry:\n  enabled: false\n' > $@

# A fresh clone has .dvc/config from git; the local remote folder is ignored and made on demand.
.dvc/config: | $(DVC_VENV)/.installed
	@test -f $@ || { $(DVC_VENV)/bin/dvc init -q && $(DVC_VENV)/bin/dvc config core.analytics false \
	  && $(DVC_VENV)/bin/dvc remote add -d local .dvc-remote; }

pipeline: setup
	$(VENV)/bin/dagster asset materialize -m dagster_project.definitions --select '*'

test: setup
	$(VENV)/bin/pytest -q

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow"

ui: setup
	$(VENV)/bin/dagster dev -m dagster_project.definitions

repro: setup
	$(DVC_VENV)/bin/dvc repro

lint: setup
	$(VENV)/bin/ruff check orchestra dagster_project tests bench

clean:
	rm -rf $(DAGSTER_HOME) data/*/ mlflow.db .dvc-remote
