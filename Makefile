# The two commands: `make demo` and `make test`. Each sets up .venv when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The torch version CI tests; a torch already installed in the venv is kept.
TORCH_VERSION ?= 2.13.0
# What the demo needs, what the default test suite needs (every optional backend whose tests run
# by default), and what only slow-marked tests need (brax/jax, ~550 MB).
DEMO_EXTRAS ?= gym,plot
TEST_EXTRAS ?= gym,dev,plot,offline,atari,open_spiel,mo_gym,minigrid,jumanji,mujoco,dm_control,vmas,pettingzoo,tensorboard,wandb,ray,submitit,envpool,chess
SLOW_EXTRAS ?= brax,mujoco_playground
PYTEST_ARGS ?=

.PHONY: setup setup-test build demo test test-slow lint format docs bench bench-docs clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first: otherwise a dependency's unpinned "torch" pulls a CUDA build.
$(VENV)/.torch: $(VENV)/bin/python
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==$(TORCH_VERSION)
	touch $@

$(VENV)/.installed-demo: $(VENV)/.torch pyproject.toml setup.py
	$(PIP) install -q -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.torch pyproject.toml setup.py
	$(PIP) install -q -e ".[$(TEST_EXTRAS)]"
	# gymnax pins gymnasium<1.4 and procgen numpy<2, yet both run with ours: their dependencies
	# first, then the packages themselves without their pins
	$(PIP) install -q flax seaborn "craftax>=1.6,<2" "imageio>=2.6" "glfw>=1.8" cffi
	$(PIP) install -q --no-deps "gymnax>=1.0,<2" "procgen-mirror>=0.10.7" "gym3>=0.3.3"
	touch $@

setup: $(VENV)/.installed-demo
setup-test: $(VENV)/.installed-test

# Rebuilds torchrl._C in place (after editing csrc/) and fails when it does not import.
build: $(VENV)/.torch
	$(PY) -c "import pybind11, setuptools" 2>/dev/null || $(PIP) install -q "pybind11>=2.10" setuptools
	$(PY) setup.py -q build_ext --inplace
	$(PY) -c "import torchrl._C"

demo: setup build
	$(PY) examples/demo.py

# Runs from test/ so that files some simulators drop in the working directory stay there.
test: setup-test build
	cd test && ../$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) . ../torchrl --doctest-modules

test-slow: setup-test build
	$(PIP) install -q -e ".[$(TEST_EXTRAS),$(SLOW_EXTRAS)]"
	cd test && ../$(PY) -m pytest -q -p no:cacheprovider -m slow $(PYTEST_ARGS) .

lint: setup-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy torchrl

format: setup-test
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# Tutorials are executed by sphinx-gallery and cached in docs/tutorials/ (re-run when changed).
docs: setup-test build
	$(PY) -c "import furo, sphinx_gallery" 2>/dev/null || $(PIP) install -q -e ".[docs]"
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	$(PY) tools/docs_linkcheck.py docs/_build/html

# Records the benchmarks' JSON output for docs/benchmarks.rst (then run make docs).
BENCH_DOCS ?= gae replay segment_tree specs transforms modules losses import_time
bench-docs: setup-test build
	$(PY) tools/docs_record.py bench $(BENCH_DOCS)

bench: setup-test build
	for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf build docs/_build torchrl/_C*.so
