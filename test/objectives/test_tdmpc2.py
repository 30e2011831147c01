"""TD-MPC2: SimNorm and symlog two-hot helpers, the planner, the loss, the stepper, the trainer."""

from __future__ import annotations

import math
import os
import runpy
import sys

import pytest
import torch
from tensordict import TensorDict

from torchrl.collectors import SyncDataCollector
from torchrl.envs import (
    ActionScaling,
    Compose,
    InitTracker,
    PendulumEnv,
    StepCounter,
    TransformedEnv,
)
from torchrl.envs.utils import ExplorationType, set_exploration_type, step_mdp
from torchrl.modules.tdmpc2 import (
    SimNorm,
    TdMpc2Planner,
    TdMpc2PolicyPrior,
    TdMpc2QEnsemble,
    TdMpc2WorldModel,
    simnorm,
    symlog_two_hot,
    symlog_two_hot_decode,
)
from torchrl.objectives import SoftUpdate
from torchrl.objectives.tdmpc2 import TdMpc2Loss
from torchrl.trainers.algorithms.tdmpc2 import (
    TdMpc2OptimizationStepper,
    TdMpc2Trainer,
    default_optimizers,
)

LATENT, MLP, OBS, ACT, H = 16, 32, 3, 1, 3


def nets(num_q: int = 2):
    wm = TdMpc2WorldModel(OBS, ACT, latent_dim=LATENT, mlp_dim=MLP)
    pi = TdMpc2PolicyPrior(LATENT, ACT, mlp_dim=MLP)
    q = TdMpc2QEnsemble(LATENT, ACT, mlp_dim=MLP, num_q=num_q)
    return wm, pi, q


def planner_of(wm, pi, q, **kwargs):
    opts = dict(horizon=H, num_samples=32, num_elites=8, num_pi_trajs=4, iterations=2)
    opts.update(kwargs)
    return TdMpc2Planner(wm, pi, q, **opts)


def sequences(batch: int = 6, horizon: int = H) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(batch, horizon, OBS),
            "action": torch.rand(batch, horizon, ACT) * 2 - 1,
            "next": {
                "observation": torch.randn(batch, horizon, OBS),
                "reward": torch.randn(batch, horizon, 1),
                "terminated": torch.zeros(batch, horizon, 1, dtype=torch.bool),
            },
        },
        [batch, horizon],
    )


# -- helpers --------------------------------------------------------------------------------------
def test_simnorm_matches_groupwise_softmax():
    x = torch.randn(4, 24)
    out = simnorm(x, 8)
    for g in range(3):
        expected = torch.exp(x[:, 8 * g : 8 * (g + 1)])
        expected = expected / expected.sum(-1, keepdim=True)
        torch.testing.assert_close(out[:, 8 * g : 8 * (g + 1)], expected)
    torch.testing.assert_close(SimNorm(8)(x), out)
    with pytest.raises(ValueError, match="multiple of simplex_dim"):
        simnorm(torch.randn(2, 10), 8)


def test_symlog_two_hot_matches_formula_and_round_trips():
    vmin, vmax, bins = -5.0, 5.0, 21
    values = torch.tensor([[-30.0], [-0.7], [0.0], [0.3], [2.0], [100.0]])
    enc = symlog_two_hot(values, vmin, vmax, bins)
    support = torch.linspace(vmin, vmax, bins)
    for v, row in zip(values.squeeze(-1).tolist(), enc):
        x = min(max(math.copysign(math.log1p(abs(v)), v), vmin), vmax)
        pos = (x - vmin) / (vmax - vmin) * (bins - 1)
        low = min(int(math.floor(pos)), bins - 2)
        expected = torch.zeros(bins)
        expected[low] = 1 - (pos - low)
        expected[low + 1] += pos - low
        torch.testing.assert_close(row, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close((row * support).sum(), torch.tensor(x), atol=1e-5, rtol=0)
    decoded = symlog_two_hot_decode(enc.clamp_min(1e-12).log(), vmin, vmax)
    inside = values.abs() < math.expm1(vmax)
    torch.testing.assert_close(decoded[inside], values[inside], atol=1e-3, rtol=1e-4)
    with pytest.raises(ValueError, match="trailing singleton"):
        symlog_two_hot(torch.zeros(3), vmin, vmax, bins)
    with pytest.raises(ValueError, match="num_bins"):
        symlog_two_hot(torch.zeros(3, 1), vmin, vmax, 1)


def test_model_shapes_and_simnorm_latents():
    wm, pi, q = nets(3)
    z = wm.encode(torch.randn(5, OBS))
    torch.testing.assert_close(z.reshape(5, -1, 8).sum(-1), torch.ones(5, LATENT // 8))
    a, mode, log_prob = pi(z)
    assert a.shape == mode.shape == (5, ACT) and log_prob.shape == (5, 1)
    assert q.logits(z, a).shape == (3, 5, 101) and q.values(z, a).shape == (3, 5, 1)
    # zero-initialised heads predict 0
    torch.testing.assert_close(wm.reward(z, a), torch.zeros(5, 1), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="mode"):
        q.reduce(z, a, "max")
    with pytest.raises(ValueError, match="num_q"):
        TdMpc2QEnsemble(LATENT, ACT, num_q=1)


# -- planner --------------------------------------------------------------------------------------
def test_planner_shapes_bounds_and_seed_determinism():
    wm, pi, q = nets()
    planner = planner_of(wm, pi, q)
    td = TensorDict(observation=torch.randn(2, 5, OBS), batch_size=[2, 5])
    torch.manual_seed(0)
    out1 = planner(td.clone())
    torch.manual_seed(0)
    out2 = planner(td.clone())
    assert out1["action"].shape == (2, 5, ACT)
    assert out1["next", "_tdmpc2_prev_mean"].shape == (2, 5, H, ACT)
    assert out1["action"].abs().max() <= 1
    torch.testing.assert_close(out1["action"], out2["action"])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        det = planner(td.clone())["action"]
    assert det.abs().max() <= 1


def test_planner_warm_start_and_is_init():
    wm, pi, q = nets()
    # No policy trajectories and a tight Gaussian: the plan stays near its starting mean.
    planner = planner_of(wm, pi, q, num_pi_trajs=0, iterations=1, min_std=0.01, max_std=0.01)
    prev = torch.full((4, H, ACT), 0.8)
    td = TensorDict(observation=torch.randn(4, OBS), _tdmpc2_prev_mean=prev, batch_size=[4])
    td["is_init"] = torch.tensor([[False], [False], [True], [True]])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = planner(td)
    mean = out["next", "_tdmpc2_prev_mean"]
    # warm rows start from the shifted mean: 0.8 for the first H - 1 steps, 0 for the last
    torch.testing.assert_close(
        mean[:2, : H - 1], torch.full((2, H - 1, ACT), 0.8), atol=0.05, rtol=0
    )
    torch.testing.assert_close(mean[:2, H - 1], torch.zeros(2, ACT), atol=0.05, rtol=0)
    torch.testing.assert_close(mean[2:], torch.zeros(2, H, ACT), atol=0.05, rtol=0)
    assert (out["action"][:2] - 0.8).abs().max() < 0.05
    # step_mdp carries the fitted mean to the next call's input
    assert "_tdmpc2_prev_mean" in step_mdp(out).keys()


def test_planner_primer_in_rollout():
    wm, pi, q = nets()
    planner = planner_of(wm, pi, q)
    env = TransformedEnv(
        PendulumEnv(batch_size=[2], seed=0),
        Compose(ActionScaling(), InitTracker(), planner.make_tensordict_primer()),
    )
    rollout = env.rollout(4, planner)
    assert rollout["_tdmpc2_prev_mean"].shape == (2, 4, H, ACT)
    assert (rollout["_tdmpc2_prev_mean"][:, 0] == 0).all()
    torch.testing.assert_close(
        rollout["_tdmpc2_prev_mean"][:, 1:], rollout["next", "_tdmpc2_prev_mean"][:, :-1]
    )


def test_planner_errors():
    wm, pi, q = nets()
    with pytest.raises(ValueError, match="num_pi_trajs"):
        planner_of(wm, pi, q, num_samples=8, num_pi_trajs=8)
    with pytest.raises(ValueError, match="num_elites"):
        planner_of(wm, pi, q, num_samples=8, num_elites=9, num_pi_trajs=2)
    with pytest.raises(ValueError, match="horizon"):
        planner_of(wm, pi, q, horizon=0)
    with pytest.raises(KeyError, match="observation"):
        planner_of(wm, pi, q)(TensorDict(obs=torch.zeros(1, OBS), batch_size=[1]))


# -- loss -----------------------------------------------------------------------------------------
def test_loss_keys_and_gradients_per_parameter_group():
    torch.manual_seed(0)
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    out = loss(sequences())
    assert {k for k in out.keys() if k.startswith("loss_")} == {
        "loss_consistency",
        "loss_reward",
        "loss_value",
        "loss_actor",
    }
    assert out["latents"].shape == (6, H + 1, LATENT) and not out["latents"].requires_grad
    for key in ("entropy", "value_scale", "td_target_mean"):
        assert not out[key].requires_grad
    model = out["loss_consistency"] + out["loss_reward"] + out["loss_value"]
    model.backward()
    for name, module in (
        ("encoder", wm.encoder),
        ("dynamics", wm.dynamics),
        ("reward_head", wm.reward_head),
        ("q_ensemble", loss.q_ensemble),
    ):
        grads = [p.grad for p in module.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads), name
        assert any(g.abs().sum() > 0 for g in grads), name
    assert all(p.grad is None for p in pi.parameters())
    wm.zero_grad(set_to_none=True)
    loss.q_ensemble.zero_grad(set_to_none=True)
    out["loss_actor"].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in pi.parameters())
    assert all(p.grad is None for p in loss.q_ensemble.parameters())
    assert all(p.grad is None for p in wm.parameters())


def test_loss_checks_shape_and_keys():
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    with pytest.raises(ValueError, match="horizon=3"):
        loss(sequences(horizon=2))
    with pytest.raises(ValueError, match="rho"):
        TdMpc2Loss(wm, pi, q, rho=0.0)
    loss.set_keys(reward="r")
    assert ("next", "r") in loss.in_keys
    data = sequences()
    data["next", "r"] = data["next"].pop("reward")
    assert torch.isfinite(loss(data)["loss_reward"])


def test_loss_target_ensemble_soft_update():
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    assert loss.target_network_names == ["q_ensemble"]
    assert loss.q_ensemble is q  # shared with a planner
    with torch.no_grad():
        for p in q.parameters():
            p.add_(1.0)
    before = [t.clone() for t in loss.target_q_ensemble_params.values(True, True)]
    SoftUpdate(loss, tau=0.5).step()
    after = list(loss.target_q_ensemble_params.values(True, True))
    assert any(not torch.equal(a, b) for a, b in zip(after, before))


# -- stepper and trainer --------------------------------------------------------------------------
def test_stepper_updates_all_groups_and_checkpoints():
    torch.manual_seed(0)
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    opt_model, opt_actor = default_optimizers(loss, lr=1e-2)
    stepper = TdMpc2OptimizationStepper(loss, opt_model, opt_actor, target_tau=0.5)
    snapshot = {
        "wm": [p.clone() for p in wm.parameters()],
        "pi": [p.clone() for p in pi.parameters()],
        "target": [t.clone() for t in loss.target_q_ensemble_params.values(True, True)],
    }
    out = stepper(loss(sequences()))
    for key in ("loss_actor", "grad_norm_model", "grad_norm_actor", "value_scale"):
        assert torch.isfinite(out[key]) and not out[key].requires_grad
    assert any(not torch.equal(a, b) for a, b in zip(wm.parameters(), snapshot["wm"]))
    assert any(not torch.equal(a, b) for a, b in zip(pi.parameters(), snapshot["pi"]))
    targets = loss.target_q_ensemble_params.values(True, True)
    assert any(not torch.equal(a, b) for a, b in zip(targets, snapshot["target"]))
    state = stepper.state_dict()
    fresh = TdMpc2OptimizationStepper(loss, *default_optimizers(loss))
    fresh.load_state_dict(state)
    assert fresh.update_count == 1
    with pytest.raises(KeyError, match="latents"):
        stepper(TensorDict(loss_value=torch.zeros(())))
    with pytest.raises(TypeError, match="optimizer_actor"):
        TdMpc2OptimizationStepper(loss, opt_model, None)  # type: ignore[arg-type]


def make_env(planner, num_envs=2):
    return TransformedEnv(
        PendulumEnv(batch_size=[num_envs], seed=0),
        Compose(ActionScaling(), StepCounter(20), InitTracker(), planner.make_tensordict_primer()),
    )


def test_trainer_runs_on_pendulum():
    torch.manual_seed(0)
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    planner = planner_of(wm, pi, q)
    collector = SyncDataCollector(
        make_env(planner), planner, frames_per_batch=20, total_frames=60, init_random_frames=20
    )
    trainer = TdMpc2Trainer(
        collector=collector,
        total_frames=60,
        loss_module=loss,
        planner=planner,
        batch_size=4,
        optim_steps_per_batch=2,
        progress_bar=False,
        seed=0,
    )
    trainer.train()
    assert trainer.optim_count == trainer.optimization_stepper.update_count == 4
    assert len(trainer.replay_buffer) == 60
    for key in ("loss_consistency", "loss_reward", "loss_value", "loss_actor"):
        assert math.isfinite(trainer.latest_logs[key])


def test_trainer_checks_its_parts():
    wm, pi, q = nets()
    loss = TdMpc2Loss(wm, pi, q, horizon=H)
    other = planner_of(*nets())
    kwargs = dict(collector=[], total_frames=10, progress_bar=False)
    with pytest.raises(ValueError, match="same objects"):
        TdMpc2Trainer(loss_module=loss, planner=other, **kwargs)
    with pytest.raises(TypeError, match="TdMpc2Loss"):
        TdMpc2Trainer(loss_module=torch.nn.Linear(1, 1), planner=other, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both"):
        TdMpc2Trainer(
            loss_module=loss,
            planner=planner_of(wm, pi, q),
            optimizer_model=torch.optim.SGD(wm.parameters(), lr=0.1),
            **kwargs,
        )


# -- example --------------------------------------------------------------------------------------
EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "examples",
    "tdmpc2_pendulum.py",
)


def run_example(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(os.path.dirname(EXAMPLE))
    monkeypatch.setattr(sys, "argv", [EXAMPLE, *args, "--out", str(tmp_path), "--no-progress"])
    return runpy.run_path(EXAMPLE, run_name="__main__")


def test_example_smoke(tmp_path, monkeypatch, capsys):
    args = ["--frames", "200", "--num-envs", "2", "--frames-per-batch", "100"]
    args += ["--init-random-frames", "100", "--updates-per-frame", "0.05", "--batch-size", "8"]
    args += ["--num-samples", "16", "--num-elites", "4", "--num-pi-trajs", "2"]
    args += ["--iterations", "1", "--eval-every", "200", "--eval-episodes", "1"]
    args += ["--latent-dim", "16", "--mlp-dim", "16", "--num-q", "2", "--episode-steps", "20"]
    run_example(args, tmp_path, monkeypatch)
    assert "tdmpc2_pendulum: final deterministic evaluation return" in capsys.readouterr().out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


@pytest.mark.slow
def test_example_learns_pendulum(tmp_path, monkeypatch, capsys):
    """The example's defaults (~6 min here): final return far above a random policy's (~-1200)."""
    run_example([], tmp_path, monkeypatch)
    line = [s for s in capsys.readouterr().out.splitlines() if s.startswith("tdmpc2_pendulum:")][-1]
    final = float(line.split("return ")[1].split(" ")[0])
    assert final > -800, line
