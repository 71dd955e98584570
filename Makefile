# Two commands set a fresh machine up: `make demo` (or `make chat`) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
EDGESPEC := $(BIN)/edgespec

.PHONY: demo chat test pull bench clean

# The runtime install; llama-cpp-python builds llama.cpp from source the first time (minutes on
# 2 cores; pip caches the wheel afterwards).
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
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

test: $(VENV)/.installed-test pull
	$(BIN)/python -m pytest -q

bench: pull
	$(EDGESPEC) bench --limit 4 --json bench.json --plot bench.png

clean:
	rm -rf $(VENV) .pytest_cache
