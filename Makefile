# Two commands set a fresh machine up: `make demo` (or `make chat`) and `make test`.
# `make check` is the fast loop beside `make test`: lint, types, the import contract, and the tests
# that load no real model and start no subprocess.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
EDGESPEC := $(BIN)/edgespec

.PHONY: demo chat test check lint check-tests pull bench results gpu-check clean

# llama-cpp-python builds llama.cpp from source for this machine's CPU (about 5 minutes on 2
# cores). On x86 the build leaves AMX out: a CPU can report AMX where the system does not let it run
# (seen on these machines: SIGILL in ggml_backend_amx_mul_mat with the default Q4_K_M target). pip's
# wheel cache does not know build flags, so this build never reads it. Another build, e.g. CUDA:
#   make demo LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"
LLAMA_CPP := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)')

# The runtime install.
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir "$(LLAMA_CPP)"
	$(BIN)/pip install -q -e .
	touch $@

# Tests also need the transformers backend (torch pinned to the local CPU build) and test tools.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[hf,test]"
	touch $@

pull: $(VENV)/.installed
	$(EDGESPEC) models pull

demo: pull
	cat assets/demo_input.py | $(EDGESPEC) run "Add type hints and a one-line docstring to every function." --color always --stats

chat: pull
	$(EDGESPEC) chat

# Everything, the real pair included, after `make lint`; the 15 slowest tests are listed at the end.
test: lint pull
	$(BIN)/python -m pytest -q --durations=15

# The fast loop (no model download): lint first, then the fast tests. `make -k check` runs the tests
# even where lint fails.
check: lint check-tests

# What .pre-commit-config.yaml runs: ruff lint and format, the layers contract (import-linter,
# [tool.importlinter] in pyproject.toml: each layer imports only those below it, no package has an
# import cycle, edgespec never imports benchmarks/; docs/design.md, "Layers"), mypy on the whole
# package ([tool.mypy]), and no dead pointer to a page, heading or anchor (tools/check_links.py).
lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python tools/check_links.py

# The tests that load no real model (`slow`), start no process (`subprocess`), run no long
# statistical or generated checks (`heavy`) and no torch model (`torch`): markers in pyproject.toml.
# None of them runs llama.cpp's threads for long, so two workers (pytest-xdist) share the cores.
check-tests: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not subprocess and not heavy and not torch"

bench: pull
	$(EDGESPEC) bench --limit 4 --json bench.json --plot bench.png

# The tables and figures of README.md, docs/benchmarks.md and docs/design.md, and assets/bench_cpu.png,
# rendered from the JSON under benchmarks/results/ and the shipped quality table
# (tests/test_render_results.py checks that the pages match them).
results: $(VENV)/.installed
	$(BIN)/python benchmarks/render.py

# The GPU check (benchmarks/gpu_check.py): random weights of real shapes on a CUDA GPU, no model download,
# under 8 minutes. CUDA_ARCH=90 (89 for RTX 40xx, 86 for RTX 30xx) first builds llama-cpp-python with
# CUDA for that one architecture, timed, so that the llama.cpp part runs too; LLAMA_SOURCE names a
# downloaded llama-cpp-python sdist where there is no package index.
gpu-check: $(VENV)/.installed-test
	$(BIN)/python benchmarks/gpu_check.py --json gpu_check.json $(if $(CUDA_ARCH),--build-llama-cuda $(CUDA_ARCH)) \
		$(if $(LLAMA_SOURCE),--llama-source $(LLAMA_SOURCE))

clean:
	rm -rf $(VENV) .pytest_cache
