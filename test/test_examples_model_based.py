"""Smoke runs of the model-based examples (MBPO, PETS-style CEM MPC) and their model helpers.

The scripts run in this process (``runpy``) with tiny budgets; the ensemble helpers they share
(``mbpo_pendulum.GaussianEnsemble``, ``EnsembleStep``, ``fit_ensemble``) are checked directly.
"""

from __future__ import annotations

import doctest
import importlib
import os
import runpy
import sys

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")

SMOKE_ARGS = {
    "mbpo_pendulum.py": [
        "--frames", "200", "--frames-per-batch", "100", "--init-random-frames", "100",
        "--updates-per-frame", "0.2", "--rollouts-per-frame", "0.5", "--rollout-length", "2",
        "--model-train-every", "100", "--model-train-steps", "5", "--model-hidden", "16",
        "--batch-size", "32", "--eval-every", "200", "--eval-episodes", "2",
        "--final-eval-episodes", "2",
    ],
    "mpc_pendulum.py": [
        "--random-frames", "40", "--episodes", "1", "--max-steps", "20",
        "--model-train-steps", "5", "--model-hidden", "16", "--horizon", "3",
        "--optim-steps", "1", "--candidates", "8", "--top-k", "2", "--target-return", "0",
        "--eval-episodes", "2", "--final-eval-episodes", "2",
    ],
}  # fmt: skip


@pytest.fixture
def examples_path(monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    torch.set_num_threads(1)


@pytest.mark.parametrize("script", sorted(SMOKE_ARGS))
def test_example_smoke(script: str, tmp_path, monkeypatch, capsys) -> None:
    path = os.path.join(EXAMPLES, script)
    args = [*SMOKE_ARGS[script], "--out", str(tmp_path), "--no-progress"]
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(path, run_name="__main__")
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


def test_helpers_doctests(examples_path) -> None:
    module = importlib.import_module("mbpo_pendulum")
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_ensemble_fits_a_linear_system(examples_path) -> None:
    """The NLL fit learns next = obs + 0.1 * action and reward = -obs[0]**2 closely."""
    mbpo = importlib.import_module("mbpo_pendulum")
    torch.manual_seed(0)
    obs, action = torch.randn(2000, 2), torch.rand(2000, 1) * 2 - 1
    data = TensorDict(
        {
            "observation": obs,
            "action": action,
            ("next", "observation"): obs + 0.1 * action,
            ("next", "reward"): -obs[:, :1].pow(2),
        },
        batch_size=[2000],
    )
    model = mbpo.GaussianEnsemble(2, 1, members=3, hidden=32, depth=2)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    fit = mbpo.fit_ensemble(model, optim, data, 250, 128, 0.1, 2)
    assert model.elites.tolist() == sorted(model.elites.tolist()) and model.elites.numel() == 2
    assert max(fit["holdout_mse"]) < 0.05, fit
    step = mbpo.EnsembleStep(model, "mean")
    test_obs, test_action = torch.randn(100, 2), torch.rand(100, 1) * 2 - 1
    with torch.no_grad():
        nxt, reward = step(test_obs, test_action)
    assert (nxt - (test_obs + 0.1 * test_action)).abs().mean() < 0.05
    assert (reward - (-test_obs[:, :1].pow(2))).abs().mean() < 0.2


def test_ensemble_step_sample_mode_routes_rows_to_elites(examples_path) -> None:
    """Sample mode gives each row one elite's Gaussian; non-elite members are never used."""
    mbpo = importlib.import_module("mbpo_pendulum")
    torch.manual_seed(0)
    model = mbpo.GaussianEnsemble(2, 1, members=3, hidden=8, depth=1)
    with torch.no_grad():
        # member 1 predicts a huge change: it must never appear when it is not an elite
        model.head.bias[1, 0, :3] = 1e3
        model.min_logvar.fill_(-30.0)
        model.max_logvar.fill_(-20.0)
    model.elites = torch.tensor([0, 2])
    step = mbpo.EnsembleStep(model, "sample")
    obs, action = torch.zeros(7, 5, 2), torch.zeros(7, 5, 1)  # 35 rows: not a multiple of 2
    with torch.no_grad():
        nxt, reward = step(obs, action)
    assert nxt.shape == (7, 5, 2) and reward.shape == (7, 5, 1)
    assert nxt.abs().max() < 100


def test_bad_arguments_raise(examples_path) -> None:
    mbpo = importlib.import_module("mbpo_pendulum")
    mpc = importlib.import_module("mpc_pendulum")
    with pytest.raises(ValueError, match="mode must be"):
        mbpo.EnsembleStep(mbpo.GaussianEnsemble(2, 1, members=2, hidden=4), "median")
    with pytest.raises(ValueError, match="elites"):
        mbpo.Config(ensemble_size=3, elites=4)
    with pytest.raises(ValueError, match="real_ratio"):
        mbpo.Config(real_ratio=1.5)
    with pytest.raises(ValueError, match="top_k"):
        mpc.Config(candidates=10, top_k=20)
