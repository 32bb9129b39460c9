# Quick start: `make run` (serve the shipped model; `make run PORT=8001` on another port) and `make test` (every check).
# Every install goes through constraints.txt (torch pinned to the CPU wheel on disk); pip, not uv.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
HOST   ?= 127.0.0.1
PORT   ?= 8000

PG_DIR ?= /tmp/agent-triage-pg

.PHONY: browser screenshots run test install install-serve lint typecheck pytest client-test client-extras-test integrations schema readme clean-venv pg-start pg-stop

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

# Serving install: the lean base (no torch, no transformers).
$(VENV)/.serve-installed: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e .
	touch $@

# Full install: training, research and dev extras too.
$(VENV)/.all-installed: pyproject.toml client/pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e '.[train,research,dev]' -e ./client
	touch $@ $(VENV)/.serve-installed

install-serve: $(VENV)/.serve-installed
install: $(VENV)/.all-installed

# First run: creates the SQLite store and a local API key in .triage/ (git-ignored) and prints both.
run: install-serve
	TRIAGE_HOST=$(HOST) TRIAGE_PORT=$(PORT) $(VENV)/bin/triage keys local
	$(VENV)/bin/triage serve --host $(HOST) --port $(PORT)

lint: install
	$(VENV)/bin/ruff check model serve tests bench client
	$(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy model serve
	$(VENV)/bin/mypy --strict client/agent_triage_client
# bench/'s scripts import one another by bare name: checked from inside it, without the project's strict
# settings (they are not written to them); their bodies are checked all the same (--check-untyped-defs)
	cd bench && $(abspath $(VENV))/bin/mypy --config-file= --python-version 3.11 --ignore-missing-imports \
		--check-untyped-defs --explicit-package-bases *.py

# The client distribution alone: a fresh venv with only `pip install ./client`, its tests against a
# real `triage serve` (also part of `make pytest`; this runs just that).
client-test: install
	$(VENV)/bin/pytest tests/test_client_dist.py -q

# The client's framework extras ([langchain,openai-agents]) in a fresh venv, and its examples run there as
# scripts against a real `triage serve` (~2 min: not part of `make test`, which runs the examples in .venv).
client-extras-test: install
	TRIAGE_TEST_CLIENT_EXTRAS=1 $(VENV)/bin/pytest tests/test_client_examples.py -q

# The store tests run on SQLite and on a throwaway PostgreSQL cluster started here (.ci/pg-cluster:
# Debian's PostgreSQL, as the postgres user, 127.0.0.1, a free port, data under /tmp). Without
# PostgreSQL those cases skip; with CI=true they fail. An existing TRIAGE_TEST_POSTGRES_URL is used as is.
# Tests run in parallel (pytest-xdist, one process a core, at most 4): every test takes its own free
# port, temporary folder and database; a module's tests stay on one process, in order (--dist loadfile:
# some modules share one server between tests that build on each other). PYTEST_PAR= runs them one at a time.
PYTEST_PAR ?= -n auto --maxprocesses=4 --dist loadfile
pytest: install
	@if [ -n "$$TRIAGE_TEST_POSTGRES_URL" ]; then exec $(VENV)/bin/pytest $(PYTEST_PAR) $(PYTEST_ARGS); fi; \
	pgdir=$$(mktemp -d /tmp/agent-triage-pg.XXXXXX); \
	url=$$(.ci/pg-cluster start $$pgdir) || { .ci/pg-cluster stop $$pgdir; exit 1; }; \
	[ -n "$$url" ] && echo "store tests also run on PostgreSQL: $$url"; \
	status=0; TRIAGE_TEST_POSTGRES_URL="$$url" $(VENV)/bin/pytest $(PYTEST_PAR) $(PYTEST_ARGS) || status=$$?; \
	.ci/pg-cluster stop $$pgdir; exit $$status

# A PostgreSQL for trying the service on it: TRIAGE_DATABASE_URL=<printed URL> make run
pg-start:
	@.ci/pg-cluster start $(PG_DIR)

pg-stop:
	@.ci/pg-cluster stop $(PG_DIR)

# The console's browser test (tests/test_console_browser.py) drives Debian's chromium through chromedriver
# (/usr/bin/chromium, /usr/bin/chromedriver). When they are missing this installs them with apt-get where
# it can: as root (CI) or through passwordless sudo. Elsewhere (another user, no apt-get, macOS) it says how
# to install them and goes on: the browser test then skips, except under CI=true, where this fails.
BROWSER_APT := apt-get install -y chromium chromium-driver
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then as=none; why="no apt-get here"; \
	elif [ "$$(id -u)" = 0 ]; then as=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as="sudo -n"; \
	else as=none; why="installing them needs root"; fi; \
	if [ "$$as" = none ]; then \
	  echo "make browser: chromium and chromium-driver are missing ($$why). To install them (Debian, Ubuntu):"; \
	  echo "  sudo make browser    or    sudo $(BROWSER_APT)"; \
	  if [ "$$CI" = true ]; then echo "make browser: CI=true: the browser test must run"; exit 1; fi; \
	  echo "  Until then the console's browser test (tests/test_console_browser.py) skips."; exit 0; fi; \
	echo "installing chromium and chromium-driver (the console's browser test)"; \
	$$as env DEBIAN_FRONTEND=noninteractive apt-get update -q && $$as env DEBIAN_FRONTEND=noninteractive $(BROWSER_APT) -q \
	|| { echo "make browser: apt-get failed (to retry: sudo make browser)"; [ "$$CI" != true ] || exit 1; \
	     echo "  Until then the console's browser test (tests/test_console_browser.py) skips."; }

# The console's screenshots, refreshed on purpose: the browser test writes them to build/screenshots/
# (git-ignored) unless TRIAGE_SCREENSHOTS_DIR names another folder; this writes the committed ones in
# docs/img/console/ (the README's and docs/console.md's). Review `git diff --stat docs/img` and commit.
screenshots: install browser
	@[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] \
	  || { echo "make screenshots: needs chromium and chromium-driver (sudo make browser)"; exit 1; }
	TRIAGE_SCREENSHOTS_DIR=docs/img/console $(VENV)/bin/pytest tests/test_console_browser.py -q

test: lint typecheck browser pytest

# Every DVC stage rebuilt in a scratch copy of the tree and compared with the shipped artefacts and
# reports within stated tolerances (model/training/repro.py; docs/architecture.md "Reproducing the
# pipeline"): ~2 h on 2 cores. The tree and dvc.lock stay as they are; a plain `dvc repro` would
# overwrite the committed model/artifacts and reports. REPRO_ARGS="--stages runscore" rebuilds some.
.PHONY: repro
repro: install
	nice -n 10 $(PY) -m model.training.repro $(REPRO_ARGS)

schema: install-serve
	$(VENV)/bin/triage schema docs/trace.schema.json

# The README's request / answer pair, regenerated from the service (tests/test_readme.py checks it).
readme: install-serve
	$(PY) -m tests.test_readme --write

# Integration fixtures: each library records the stub agent's trace (tests/integrations/agent.py,
# against the local OpenAI-compatible stub model tests/integrations/stub_openai.py) in a venv of
# its own under $(INT_DIR), content capture on and off, into tests/fixtures/integrations/. `make
# test` installs none of them: tests/test_integrations.py reads the committed fixtures.
INT_DIR ?= .integrations
INTEGRATIONS := otel-openai-v2 openinference-openai openllmetry-openai langchain-create-agent openinference-langchain openai-agents openai-agents-trace langfuse-openai litellm-otel litellm-logging
INT_COMMON := opentelemetry-sdk opentelemetry-exporter-otlp-proto-common
INT_PKGS_otel-openai-v2 := openai==2.* opentelemetry-instrumentation-openai-v2==2.4b0 opentelemetry-util-genai==1.1b0  # 1.2b0+ lacks the module 2.4b0 imports
INT_PKGS_openinference-openai := openai==2.* openinference-instrumentation-openai==0.1.66
INT_PKGS_openllmetry-openai := openai==2.* opentelemetry-instrumentation-openai==0.62.4
INT_PKGS_langchain-create-agent := langchain==1.5.2 langchain-openai
INT_PKGS_openinference-langchain := langchain==1.5.2 langchain-openai openinference-instrumentation-langchain==0.1.80
INT_PKGS_openai-agents := openai-agents==0.24.0
INT_PKGS_openai-agents-trace := openai-agents==0.24.0
INT_PKGS_langfuse-openai := langfuse==5.0.4 openai==2.*
INT_PKGS_litellm-otel := litellm==1.110.2
INT_PKGS_litellm-logging := litellm==1.110.2

integrations: $(INTEGRATIONS:%=integration-%)
	$(VENV)/bin/pytest tests/test_integrations.py -q

integration-%:
	@test -x $(INT_DIR)/$*/bin/python || $(PYTHON) -m venv $(INT_DIR)/$*
	$(INT_DIR)/$*/bin/python -m pip install -q -c constraints.txt $(INT_COMMON) $(INT_PKGS_$*)
	$(INT_DIR)/$*/bin/python tests/integrations/record.py $* tests/fixtures/integrations on
	$(INT_DIR)/$*/bin/python tests/integrations/record.py $* tests/fixtures/integrations off
