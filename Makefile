# llmtk: `make demo` runs the main job, `make test` the test suite.
# Both create .venv and install what they need on a fresh machine.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# torch: a CPU build unless this machine has an NVIDIA GPU. `pip install torch==2.13.0`
# takes the CPU wheel where one lies on disk (as on our CI machines); elsewhere set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu to avoid PyPI's multi-GB CUDA build.
# With a GPU, pip picks PyPI's normal CUDA build in the range pyproject.toml allows.
ifeq ($(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu),gpu)
TORCH_SPEC  ?= torch>=2.4,<=2.14.1
else
TORCH_SPEC  ?= torch==2.13.0
endif
TORCH_INDEX ?=
PIP := $(BIN)/python -m pip
PIP_QUIET := --quiet --disable-pip-version-check

PREFIX ?= $(HOME)/.local

.PHONY: setup install test test-fast test-integration lint demo bench clean-venv browser

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c 'import torch' 2>/dev/null || \
	  $(PIP) install $(PIP_QUIET) "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install $(PIP_QUIET) -e '.[dev]'
	$(PIP) check
	touch $@

# Puts `llmtk` on PATH for every new shell: a link in $(PREFIX)/bin (default
# ~/.local/bin, on PATH in most distributions) to this checkout's .venv/bin/llmtk.
install: setup
	mkdir -p $(PREFIX)/bin
	ln -sf $(abspath $(BIN))/llmtk $(PREFIX)/bin/llmtk
	@echo "llmtk -> $(PREFIX)/bin/llmtk (make sure $(PREFIX)/bin is on your PATH)"

# Every test but the process-behaviour tier, which `make test-integration` runs (CI runs
# both): each of those runs once, as the fresh processes it is about, not twice.
test: setup browser
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not integration"

# `llmtk inspect --report`'s page is checked in a real headless browser (tests/test_inspect.py):
# Debian's chromium, installed here where it is missing and can be; else that test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; } || \
	  echo "chromium is not installed and could not be: the browser check of inspect's report skips"

test-fast: setup
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow and not integration"

# The tests whose subject is process behaviour (marked `integration`: pipes, signals,
# SIGKILL and resume, torchrun, the multi-process parity checks), each command a fresh
# `python -m llmtk` instead of a child of the tests' fork server (tests/forkserver.py):
# what only a fresh process shows (import-time state, signal setup, teardown) is caught.
test-integration: setup
	LLMTK_TEST_FORKSERVER=0 $(BIN)/python -m pytest -q -n auto --dist loadfile -m integration

lint: setup
	$(BIN)/ruff check llmtk tests benchmarks tools
	$(BIN)/lint-imports
	$(BIN)/python tools/check_cycles.py

# The demo, then the numbers docs/tutorial.md quotes checked against its run.
demo: setup
	bash bin/demo.sh
	$(BIN)/python tools/tutorial_numbers.py demo-out

bench: setup
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/io_throughput.py

clean-venv:
	rm -rf $(VENV)
