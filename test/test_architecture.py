"""The package's shape: imports go one way, private names stay home, tensordict internals in one module."""

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "import_graph.py"


@pytest.fixture(scope="module")
def report() -> dict:
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.analyse()


# TensorSpec.__torch_function__ (specs/base.py) builds the stacked specs of torch.stack(specs)
# with an import inside the function: a base class that makes instances of its subclasses.
LATE_CYCLES = [["torchrl.data.specs.base", "torchrl.data.specs.stacked"]]


def test_no_import_cycle_between_files(report):
    assert report["cycles"] == []
    assert report["cycles_with_late_imports"] == LATE_CYCLES


def test_no_import_from_a_higher_layer(report):
    assert report["upward"] == []


def test_tensordict_private_names_only_in_the_shim(report):
    assert report["tensordict_private"] == []


def test_few_private_names_cross_modules(report):
    # Names shared between modules are public names of their owner; the few left are
    # package-internal constants of one folder.
    assert report["private_imports"] < 80, report["private_import_list"]
