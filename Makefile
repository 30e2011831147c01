# The two commands: `make demo` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The torch version CI tests; an already-installed torch in the venv is kept.
TORCH_VERSION ?= 2.13.0
EXTRAS ?= gym,dev,plot
PYTEST_ARGS ?=

.PHONY: setup build demo test test-slow lint format docs bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(VENV)/bin/python pyproject.toml setup.py
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==$(TORCH_VERSION)
	$(PIP) install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

# Rebuilds torchrl._C in place (after editing csrc/), and fails when it does not import.
build: setup
	$(PY) setup.py -q build_ext --inplace
	$(PY) -c "import torchrl._C"

demo: build
	$(PY) examples/demo.py

test: build
	cd test && ../$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) . ../torchrl --doctest-modules

test-slow: build
	cd test && ../$(PY) -m pytest -q -p no:cacheprovider -m slow $(PYTEST_ARGS) .

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

docs: build
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench: build
	for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf build docs/_build torchrl/_C*.so
