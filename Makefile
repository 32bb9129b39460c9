# Quick start: `make run` (serve the shipped model) and `make test` (every check).
# Every install goes through constraints.txt (torch pinned to the CPU wheel on disk); pip, not uv.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test install install-serve lint typecheck pytest schema clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

# Serving install: the lean base (no torch, no transformers).
$(VENV)/.serve-installed: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e .
	touch $@

# Full install: training, research and dev extras too.
$(VENV)/.all-installed: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e '.[train,research,dev]'
	touch $@ $(VENV)/.serve-installed

install-serve: $(VENV)/.serve-installed
install: $(VENV)/.all-installed

run: install-serve
	$(VENV)/bin/triage serve --host $(HOST) --port $(PORT)

lint: install
	$(VENV)/bin/ruff check model serve tests bench

typecheck: install
	$(VENV)/bin/mypy model serve

pytest: install
	$(VENV)/bin/pytest

test: lint typecheck pytest

schema: install-serve
	$(VENV)/bin/triage schema docs/trace.schema.json
