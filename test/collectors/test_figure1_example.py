"""Smoke run of examples/ddpg_figure1.py: the paper's Figure 1 loop for DDPG on Pendulum."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddpg_figure1.py"


def test_ddpg_figure1_runs():
    spec = importlib.util.spec_from_file_location("ddpg_figure1", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reward = module.main(frames=300, seed=0, log_every=0)
    assert math.isfinite(reward)
