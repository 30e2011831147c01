"""Top-level utilities: implement_for, the TransformedEnv unwrap setting, CUDA memory helpers."""

from __future__ import annotations

import logging
import subprocess
import sys
import types

import pytest
import torch

import torchrl
from torchrl import (
    auto_unwrap_transformed_env,
    cuda_memory_profile,
    cuda_memory_stats,
    implement_for,
    reset_cuda_peak_stats,
    set_auto_unwrap_transformed_env,
)

_KEYS = ["allocated_gb", "max_allocated_gb", "max_reserved_gb", "reserved_gb"]


@pytest.fixture
def fake_module(monkeypatch):
    """A module ``fake_versioned_mod`` whose version the test sets."""
    module = types.ModuleType("fake_versioned_mod")
    module.__version__ = "1.5.0"
    monkeypatch.setitem(sys.modules, "fake_versioned_mod", module)
    yield module
    implement_for.reset()


# ------------------------------------------------------------------------------ implement_for
def test_implement_for_picks_the_fitting_range(fake_module):
    @implement_for("fake_versioned_mod", None, "1.0")
    def pick():
        return "old"

    @implement_for("fake_versioned_mod", "1.0", "2.0")
    def pick():  # noqa: F811
        return "mid"

    @implement_for("fake_versioned_mod", "2.0")
    def pick():  # noqa: F811
        return "new"

    assert pick() == "mid"
    fake_module.__version__ = "2.1.3+local"
    implement_for.reset()
    assert pick() == "new"
    fake_module.__version__ = "0.9rc1"
    implement_for.reset()
    assert pick() == "old"


def test_implement_for_overlap_last_wins_and_errors(fake_module):
    @implement_for("fake_versioned_mod", "1.0")
    def overlap(x):
        return x + 1

    @implement_for("fake_versioned_mod", "1.2")
    def overlap(x):  # noqa: F811
        return x + 2

    assert overlap(1) == 3

    @implement_for("fake_versioned_mod", "3.0")
    def too_new():
        return 0

    with pytest.raises(ImportError, match=r"too_new.*1\.5\.0"):
        too_new()

    @implement_for("surely_not_an_installed_module_xyz", "1.0")
    def missing():
        return 0

    with pytest.raises(ImportError, match="missing"):
        missing()
    with pytest.raises(TypeError, match="module_name"):
        implement_for(3)


def test_implement_for_callable_module_methods_and_classmethods(fake_module):
    class Thing:
        @implement_for(lambda: fake_module, "1.0", "2.0")
        def value(self):
            return ("method", self.tag)

        @implement_for("fake_versioned_mod", "2.0")
        def value(self):  # noqa: F811
            return ("newer", self.tag)

        @implement_for("fake_versioned_mod", "1.0", class_method=True)
        def build(cls):
            return cls

        def __init__(self):
            self.tag = 7

    assert Thing().value() == ("method", 7)
    assert Thing.build() is Thing
    # compilable: resolved at decoration time
    calls = []

    @implement_for("fake_versioned_mod", "1.0", compilable=True)
    def eager():
        calls.append(1)
        return "ok"

    key = (eager.__module__, eager.__qualname__)
    assert key in implement_for._resolved
    assert eager() == "ok"


# ------------------------------------------------------------------------------ auto unwrap
def test_auto_unwrap_default_context_decorator_and_set(monkeypatch):
    monkeypatch.delenv("AUTO_UNWRAP_TRANSFORMED_ENV", raising=False)
    assert auto_unwrap_transformed_env() is True
    assert auto_unwrap_transformed_env(allow_none=True) is None
    with set_auto_unwrap_transformed_env(False):
        assert auto_unwrap_transformed_env() is False
        with set_auto_unwrap_transformed_env(True):
            assert auto_unwrap_transformed_env() is True
        assert auto_unwrap_transformed_env() is False
    assert auto_unwrap_transformed_env(allow_none=True) is None

    @set_auto_unwrap_transformed_env(False)
    def inside():
        return auto_unwrap_transformed_env()

    assert inside() is False
    assert auto_unwrap_transformed_env() is True
    try:
        set_auto_unwrap_transformed_env(False).set()
        assert auto_unwrap_transformed_env() is False
    finally:
        torchrl._utils._auto_unwrap[0] = None
    with pytest.raises(TypeError, match="bool"):
        set_auto_unwrap_transformed_env("no")


def test_auto_unwrap_environment_variable(monkeypatch):
    monkeypatch.setenv("AUTO_UNWRAP_TRANSFORMED_ENV", "0")
    assert auto_unwrap_transformed_env() is False
    with set_auto_unwrap_transformed_env(True):
        assert auto_unwrap_transformed_env() is True  # the explicit setting wins
    monkeypatch.setenv("AUTO_UNWRAP_TRANSFORMED_ENV", "maybe")
    with pytest.raises(ValueError, match="AUTO_UNWRAP_TRANSFORMED_ENV"):
        auto_unwrap_transformed_env()


# ------------------------------------------------------------------------------ CUDA memory
def test_cuda_memory_stats_without_cuda_device():
    stats = cuda_memory_stats("cpu")
    assert sorted(stats) == _KEYS
    assert all(v == 0.0 for v in stats.values())
    reset_cuda_peak_stats("cpu")  # no-op, no error


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cuda_memory_helpers_on_cpu_only_machine(caplog):
    assert all(v == 0.0 for v in cuda_memory_stats().values())
    reset_cuda_peak_stats()
    with caplog.at_level(logging.INFO, logger="torchrl"):
        with cuda_memory_profile("phase") as prof:
            torch.zeros(10)
    assert sorted(prof.stats) == _KEYS and prof.delta == {"allocated_gb": 0.0, "reserved_gb": 0.0}
    assert "[phase]" in caplog.text

    @cuda_memory_profile("decorated", log=False)
    def work():
        return 5

    assert work() == 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_memory_profile_measures_allocations():
    with cuda_memory_profile("alloc", log=False) as prof:
        x = torch.empty(64 * 1024**2, dtype=torch.uint8, device="cuda")
    assert prof.delta["allocated_gb"] > 0.05
    assert prof.stats["max_allocated_gb"] >= prof.stats["allocated_gb"] > 0
    del x
    reset_cuda_peak_stats()


def test_top_level_import_stays_light():
    code = (
        "import sys, torchrl; "
        "assert 'torch' not in sys.modules, 'torch'; "
        "assert 'torchrl.envs' not in sys.modules; "
        "torchrl.implement_for; torchrl.cuda_memory_stats"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
