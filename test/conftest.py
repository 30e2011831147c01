import os

import pytest
import torch

# Two cores: oversubscribed OpenMP threads make small tensor ops much slower.
torch.set_num_threads(1)
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
