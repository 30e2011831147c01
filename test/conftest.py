import os
import sys

import pytest
import torch

# Test helpers (test/_envs.py, ...) import by plain name whatever the working directory.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Two cores: oversubscribed OpenMP threads make small tensor ops much slower.
torch.set_num_threads(1)
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
