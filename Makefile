# Every target that needs the environment depends on .venv/.installed, so
# `make run` and `make test` work on a fresh clone with nothing else done.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
GEN_DIR := clients/python
PROTOS := $(wildcard protos/infercache/v1/*.proto)

.PHONY: install run test lint protos protos-check bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml clients/python/pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e './clients/python[kv]' -e '.[dev,kv]'
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/infercache serve

test: install
	bash scripts/ensure_redis.sh
	$(BIN)/python -m pytest

node_modules/.bin/buf: package.json
	npm install --no-audit --no-fund --silent
	touch $@

lint: install node_modules/.bin/buf
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	node_modules/.bin/buf lint

# Generated code is committed; this is the only way it is produced.
protos: install
	$(BIN)/python scripts/gen_protos.py $(GEN_DIR)

protos-check: install
	$(BIN)/python scripts/gen_protos.py --check $(GEN_DIR)

bench: install
	$(BIN)/python bench/lookup.py --quick

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
