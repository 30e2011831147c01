"""Importing torchrl is cheap and has no side effects."""

import subprocess
import sys

import pytest

_SIDE_EFFECTS_PROBE = """
import multiprocessing, sys, warnings
import torch, tensordict  # they may touch warning filters themselves: not ours to judge
filters_before = list(warnings.filters)
import torchrl, torchrl.envs, torchrl.data
assert multiprocessing.get_start_method(allow_none=True) is None, "start method was set"
assert warnings.filters == filters_before, "warning filters changed"
for optional in ("gymnasium", "dm_control", "brax", "jax", "vmas", "h5py", "ray", "submitit",
                 "wandb", "tensorboard", "matplotlib"):
    assert optional not in sys.modules, f"{optional} was imported by import torchrl"
print("ok")
"""


def test_import_has_no_side_effects():
    out = subprocess.run(
        [sys.executable, "-c", _SIDE_EFFECTS_PROBE], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_extension_builds():
    # CI must fail when the C++ extension did not build: no skip here.
    import torchrl._C  # noqa: F401


def test_lazy_subpackages():
    import torchrl

    assert torchrl.envs.__name__ == "torchrl.envs"
    with pytest.raises(AttributeError, match="no attribute"):
        torchrl.not_a_subpackage  # noqa: B018
