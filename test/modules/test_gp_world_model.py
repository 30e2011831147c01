"""GPWorldModel and RBFController (PILCO's model and policy): fits, moment matching, gradients."""

from __future__ import annotations

import doctest
import math
import os
import runpy
import sys

import pytest
import torch
from tensordict import TensorDict

from torchrl.modules import gp_world_model as gp_module
from torchrl.modules import rbf_controller as rbf_module
from torchrl.modules.gp_world_model import GPWorldModel
from torchrl.modules.rbf_controller import RBFController

f64 = torch.float64


def _sine_model(n: int = 40, seed: int = 0) -> GPWorldModel:
    """A 1-D state whose change is sin(x) whatever the action: fitted on x in [-3, 3]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g, dtype=f64) * 6 - 3
    u = torch.rand(n, 1, generator=g, dtype=f64) * 2 - 1
    nxt = x + torch.sin(x) + 0.01 * torch.randn(n, 1, generator=g, dtype=f64)
    model = GPWorldModel(obs_dim=1, action_dim=1)
    model.fit(TensorDict({"observation": x, "action": u, ("next", "observation"): nxt}, [n]))
    return model


def _random_model(obs_dim: int = 2, action_dim: int = 1, n: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, obs_dim, generator=g, dtype=f64)
    act = torch.randn(n, action_dim, generator=g, dtype=f64)
    nxt = obs + 0.3 * torch.sin(obs.roll(1, -1) * 2) + 0.2 * act.tanh()
    nxt = nxt + 0.02 * torch.randn(n, obs_dim, generator=g, dtype=f64)
    model = GPWorldModel(obs_dim, action_dim)
    model.fit(TensorDict({"observation": obs, "action": act, ("next", "observation"): nxt}, [n]))
    return model


def test_gp_fits_a_sine_and_is_unsure_away_from_data() -> None:
    model = _sine_model()
    x = torch.linspace(-2.5, 2.5, 21, dtype=f64).unsqueeze(-1)
    mean, var = model.predict(x, torch.zeros_like(x))
    assert (mean - (x + torch.sin(x))).abs().max() < 0.05
    assert var.max() < 1e-2
    far = torch.tensor([[0.0], [4.0], [6.0], [10.0]], dtype=f64)
    _, var_far = model.predict(far, torch.zeros_like(far))
    assert (var_far.squeeze(-1).diff() > 0).all(), var_far.squeeze(-1)
    assert var_far[-1] > 100 * var_far[0]


def test_fit_learns_ard_lengthscales() -> None:
    # The change depends on the observation only: the action's lengthscale grows.
    model = _sine_model(n=60)
    ls = model.lengthscales_sq.sqrt()[0]
    assert ls[1] > 5 * ls[0]


def test_forward_deterministic_matches_predict() -> None:
    model = _random_model()
    obs, act = torch.randn(5, 2, dtype=f64), torch.randn(5, 1, dtype=f64)
    td = TensorDict(
        {
            ("observation", "mean"): obs,
            ("observation", "var"): torch.zeros(5, 2, 2, dtype=f64),
            ("action", "mean"): act,
            ("action", "var"): torch.zeros(5, 1, 1, dtype=f64),
            ("action", "cross_covariance"): torch.zeros(5, 2, 1, dtype=f64),
        },
        [5],
    )
    model(td)
    mean, var = model.predict(obs, act)
    torch.testing.assert_close(td["next", "observation", "mean"], mean)
    torch.testing.assert_close(td["next", "observation", "var"], torch.diag_embed(var))
    # Moment matching at a zero covariance gives the same answer.
    mm_mean, mm_cov = model.propagate(
        obs,
        torch.zeros(5, 2, 2, dtype=f64),
        act,
        torch.zeros(5, 1, 1, dtype=f64),
        torch.zeros(5, 2, 1, dtype=f64),
    )
    torch.testing.assert_close(mm_mean, mean)
    torch.testing.assert_close(mm_cov, torch.diag_embed(var), atol=1e-8, rtol=1e-6)


def test_moment_matching_against_monte_carlo() -> None:
    # The first two moments of the GP's predictive distribution at a Gaussian input are exact:
    # mean = E[m(x)], cov = Cov[x + m(x)] + diag(E[v(x)]) (law of total covariance).
    model = _random_model()
    mu = torch.tensor([0.2, -0.3, 0.5], dtype=f64)
    a = torch.tensor([[0.3, 0.1, 0.0], [0.1, 0.25, 0.05], [0.0, 0.05, 0.2]], dtype=f64)
    sigma = a @ a.T
    mean, cov = model.propagate(mu[:2], sigma[:2, :2], mu[2:], sigma[2:, 2:], sigma[:2, 2:])
    g = torch.Generator().manual_seed(1)
    z = mu + torch.randn(100_000, 3, generator=g, dtype=f64) @ torch.linalg.cholesky(sigma).T
    m, v = model.predict(z[:, :2], z[:, 2:])
    mc_mean = m.mean(0)
    mc_cov = torch.cov(m.T) + torch.diag(v.mean(0))
    torch.testing.assert_close(mean, mc_mean, atol=5e-3, rtol=0)
    torch.testing.assert_close(cov, mc_cov, atol=5e-3, rtol=0)


def test_forward_batched_and_keys() -> None:
    model = GPWorldModel(
        2,
        1,
        in_keys=["am", "av", "ac", "om", "ov"],
        out_keys=[("out", "mean"), ("out", "cov")],
    )
    with pytest.raises(RuntimeError, match="fit"):
        model.predict(torch.zeros(2), torch.zeros(1))
    obs = torch.randn(20, 2)
    data = TensorDict(
        {"observation": obs, "action": torch.randn(20, 1), ("next", "observation"): obs}, [20]
    )
    model.fit(data, steps=10)
    td = TensorDict(
        {
            "om": torch.zeros(3, 4, 2),
            "ov": 0.1 * torch.eye(2).expand(3, 4, 2, 2),
            "am": torch.zeros(3, 4, 1),
            "av": 0.1 * torch.eye(1).expand(3, 4, 1, 1),
            "ac": torch.zeros(3, 4, 2, 1),
        },
        [3, 4],
    )
    out = model(td)
    assert out["out", "mean"].shape == (3, 4, 2) and out["out", "mean"].dtype == torch.float32
    assert out["out", "cov"].shape == (3, 4, 2, 2)
    assert (torch.linalg.eigvalsh(out["out", "cov"].double()) > 0).all()
    with pytest.raises(KeyError, match="'om'"):
        model(td.exclude("om"))
    with pytest.raises(ValueError, match="'ov'"):
        model(td.set("ov", torch.zeros(3, 4, 3, 3)))


def test_gp_errors() -> None:
    with pytest.raises(ValueError, match="in_keys"):
        GPWorldModel(2, 1, in_keys=["a"])
    with pytest.raises(ValueError, match="out_keys"):
        GPWorldModel(2, 1, out_keys=["a"])
    model = GPWorldModel(2, 1)
    with pytest.raises(KeyError, match="action"):
        model.fit(TensorDict({"observation": torch.zeros(3, 2)}, [3]))
    bad = TensorDict(
        {
            "observation": torch.zeros(3, 2),
            "action": torch.zeros(3, 2),
            ("next", "observation"): torch.zeros(3, 2),
        },
        [3],
    )
    with pytest.raises(ValueError, match="'action'"):
        model.fit(bad)


def test_controller_bounds_and_deterministic_call() -> None:
    torch.manual_seed(0)
    ctrl = RBFController(3, 2, max_action=torch.tensor([1.0, 0.5]), n_basis=8)
    with torch.no_grad():
        ctrl.weights.mul_(100)  # a large pre-squash output
    x = 5 * torch.randn(1000, 3)
    u = ctrl.act(x)
    assert (u.abs() <= torch.tensor([1.0, 0.5])).all()
    assert u[:, 0].abs().max() > 0.9
    mean, cov, cross = ctrl(x[:7])
    torch.testing.assert_close(mean, u[:7], atol=1e-5, rtol=1e-5)
    assert cov.abs().max() < 1e-5 and cross.abs().max() < 1e-5
    with pytest.raises(ValueError, match="input_dim=3"):
        ctrl(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="positive"):
        RBFController(3, 1, max_action=-1.0)


def test_controller_moments_against_monte_carlo() -> None:
    torch.manual_seed(0)
    ctrl = RBFController(2, 2, max_action=None, n_basis=6).double()
    mu = torch.tensor([0.3, -0.2], dtype=f64)
    sigma = torch.tensor([[0.3, 0.1], [0.1, 0.2]], dtype=f64)
    mean, cov, cross = ctrl(mu, sigma)
    g = torch.Generator().manual_seed(2)
    x = mu + torch.randn(400_000, 2, generator=g, dtype=f64) @ torch.linalg.cholesky(sigma).T
    with torch.no_grad():
        p = ctrl.unsquashed(x)
    torch.testing.assert_close(mean, p.mean(0), atol=3e-3, rtol=0)
    torch.testing.assert_close(cov, torch.cov(p.T), atol=3e-3, rtol=0)
    mc_cross = ((x - x.mean(0)).unsqueeze(-1) * (p - p.mean(0)).unsqueeze(-2)).mean(0)
    torch.testing.assert_close(cross, mc_cross, atol=3e-3, rtol=0)


def test_squash_sin_against_monte_carlo() -> None:
    m = torch.tensor([0.4, -1.0], dtype=f64)
    s = torch.tensor([[0.5, 0.2], [0.2, 0.3]], dtype=f64)
    bound = torch.tensor([2.0, 1.0], dtype=f64)
    u_mean, u_cov, jac = RBFController.squash_sin(m, s, bound)
    g = torch.Generator().manual_seed(3)
    p = m + torch.randn(400_000, 2, generator=g, dtype=f64) @ torch.linalg.cholesky(s).T
    u = bound * torch.sin(p)
    torch.testing.assert_close(u_mean, u.mean(0), atol=5e-3, rtol=0)
    torch.testing.assert_close(u_cov, torch.cov(u.T), atol=5e-3, rtol=0)
    mc_cross = ((p - m).unsqueeze(-1) * (u - u.mean(0)).unsqueeze(-2)).mean(0)  # Cov[p, u]
    torch.testing.assert_close(s @ jac, mc_cross, atol=5e-3, rtol=0)


def _expected_cost(mean: torch.Tensor, cov: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """E[1 - exp(-|x - target|^2 / 2)] for x ~ N(mean, cov) (a saturating cost)."""
    eye = torch.eye(mean.shape[-1], dtype=mean.dtype)
    s1 = cov + eye
    diff = (mean - target).unsqueeze(-1)
    quad = (diff.mT @ torch.linalg.solve(s1, diff)).squeeze(-1).squeeze(-1)
    return 1 - torch.exp(-0.5 * quad) / torch.sqrt(torch.linalg.det(s1))


def _propagated_cost(model, ctrl, horizon: int = 3) -> torch.Tensor:
    mean = torch.tensor([0.5, -0.5], dtype=f64)
    cov = 0.05 * torch.eye(2, dtype=f64)
    target = torch.zeros(2, dtype=f64)
    total = torch.zeros((), dtype=f64)
    for _ in range(horizon):
        a_mean, a_cov, cross = ctrl(mean, cov)
        mean, cov = model.propagate(mean, cov, a_mean, a_cov, cross)
        total = total + _expected_cost(mean, cov, target)
    return total


def test_gradient_of_propagated_cost_matches_finite_differences() -> None:
    torch.manual_seed(0)
    model = _random_model(n=15)
    ctrl = RBFController(2, 1, max_action=1.0, n_basis=3).double()
    cost = _propagated_cost(model, ctrl)
    cost.backward()
    assert model.log_lengthscales.grad is not None  # hyper-parameters are not frozen silently
    params = [ctrl.weights, ctrl.centres, ctrl.log_lengthscales]
    grads = [p.grad.clone() for p in params]
    assert all(g.abs().sum() > 0 for g in grads)
    eps = 1e-4  # smaller steps meet the rounding of the model's ill-conditioned K^-1
    with torch.no_grad():
        for param, grad in zip(params, grads):
            flat, gflat = param.view(-1), grad.view(-1)
            for i in range(flat.numel()):
                old = float(flat[i])
                flat[i] = old + eps
                up = _propagated_cost(model, ctrl)
                flat[i] = old - eps
                down = _propagated_cost(model, ctrl)
                flat[i] = old
                fd = (up - down) / (2 * eps)
                assert math.isclose(float(fd), float(gflat[i]), rel_tol=1e-4, abs_tol=1e-7)


@pytest.mark.parametrize("module", [gp_module, rbf_module])
def test_doctests(module) -> None:
    result = doctest.testmod(module, verbose=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "examples")
PILCO_SMOKE_ARGS = [
    "--max-steps", "30", "--episodes", "1", "--max-points", "20", "--gp-steps", "5",
    "--horizon", "3", "--beliefs", "2", "--n-basis", "4", "--policy-iters", "2",
    "--eval-episodes", "2", "--final-eval-episodes", "2", "--target-return", "0",
]  # fmt: skip


def test_pilco_example_smoke(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("gymnasium")
    path = os.path.join(EXAMPLES, "pilco_pendulum.py")
    monkeypatch.setattr(
        sys, "argv", [path, *PILCO_SMOKE_ARGS, "--out", str(tmp_path), "--no-progress"]
    )
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(path, run_name="__main__")
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"
