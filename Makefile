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
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup system-deps cluster-deps pipeline test test-fast test-cluster ui mlflow-ui screenshots repro lint clean \
	cluster-up cluster-down pipeline-cluster docs

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

# DVC lives in its own environment: it pins antlr4-python3-runtime 4.9, Dagster needs 4.13. With the
# S3 plugin, for a shared object-store remote (docs/how-to/lineage.md, Sharing data).
$(DVC_VENV)/.installed:
	@test -x $(DVC_VENV)/bin/python || $(PYTHON) -m venv $(DVC_VENV)
	$(DVC_VENV)/bin/pip install -q --disable-pip-version-check 'dvc[s3]==3.*'
	@touch $@

$(DAGSTER_HOME)/dagster.yaml:
	@mkdir -p $(DAGSTER_HOME)
	@printf 'telemetry:\n  enabled: false\n' > $@

# A fresh clone has .dvc/config from git; the local remote folder is ignored and made on demand.
.dvc/config: | $(DVC_VENV)/.installed
	@test -f $@ || { $(DVC_VENV)/bin/dvc init -q && $(DVC_VENV)/bin/dvc config core.analytics false \
	  && $(DVC_VENV)/bin/dvc remote add -d local .dvc-remote; }

# Dagster materializes what is not up to date (lineage records), every benchmark shard in one run;
# then dvc.lock records what was built, so `dvc status` is clean and `make repro` has nothing to do.
pipeline: setup
	$(VENV)/bin/python -m launch.pipeline

# lint-imports first: the import contracts in pyproject.toml (layers, no cycles, no Dagster in orchestra/).
test: setup cluster-deps
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q

test-fast: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q -m "not slow"

ui: setup
	$(VENV)/bin/dagster dev -m dagster_project.definitions

# The project's MLflow store (tracking.mlflow_uri) on http://127.0.0.1:5000 (tracking.ui_url).
mlflow-ui: setup
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow ui \
	  --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1 --port 5000

# docs/*.png: the Dagster asset graph and latest run, the DA-GRPO run in MLflow (after make pipeline),
# the docs site's home page and params reference,
# taken with the Debian chromium (installed when missing, as root) through Playwright.
screenshots: setup
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian package: chromium"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "error: chromium missing; install the Debian package chromium (sudo apt-get install chromium)" >&2; exit 1; \
	  fi; }
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev,docs]'
	$(VENV)/bin/python scripts/ui_screenshots.py --out docs
	$(MAKE) docs
	$(VENV)/bin/python scripts/docs_screenshots.py --site site --out docs

# The cluster profile's servers (launch/cluster.py): Redis and PostgreSQL from Debian, installed
# when missing (as root), a clear message otherwise (tests/test_cluster.py then skips, saying why).
cluster-deps:
	@missing=""; command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "warning: missing$$missing for the cluster profile (sudo apt-get install$$missing)" >&2; \
	  fi; \
	fi

# A cluster on this machine in .cluster/: Redis, PostgreSQL (the Dagster instance, MLflow's store), an
# MLflow server and WORKERS dagster-celery workers; `make cluster-down` stops all of it.
WORKERS ?= 2
cluster-up: setup cluster-deps
	$(VENV)/bin/python -m launch.cluster up --workers $(WORKERS)

cluster-down:
	$(VENV)/bin/python -m launch.cluster down

# The lineage through a cluster brought up for it and stopped after it, however the run ends.
pipeline-cluster: setup cluster-deps
	$(VENV)/bin/python -m launch.cluster pipeline --workers $(WORKERS)

test-cluster: setup cluster-deps
	$(VENV)/bin/pytest -q tests/test_cluster.py

# The documentation site in site/: the reference pages generated from the code, then mkdocs (strict).
docs: $(VENV)/.installed
	$(VENV)/bin/python scripts/docs_reference.py --out docs/reference
	$(VENV)/bin/mkdocs build --strict --quiet
	@echo "open site/index.html"

repro: setup
	$(DVC_VENV)/bin/dvc repro

lint: setup
	$(VENV)/bin/ruff check orchestra dagster_project launch tests bench scripts
	$(VENV)/bin/lint-imports

# Every asset output and run record; data/incoming/ (a user's seed files) stays.
clean:
	find data -mindepth 1 -maxdepth 1 ! -name incoming ! -name .gitignore -exec rm -rf {} +
	rm -rf $(DAGSTER_HOME) mlflow.db mlartifacts .dvc-remote .cluster
