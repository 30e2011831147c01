"""RNDLoss against hand-written references, and with the RNDTransform it trains."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import assert_matches, float64, mlp
from tensordict import TensorDict
from torch import nn

from torchrl.envs import PendulumEnv
from torchrl.envs.transforms import RNDTransform, RunningMeanStd, TransformedEnv
from torchrl.envs.transforms.rnd import rnd_prediction_error
from torchrl.objectives.rnd import RNDLoss


def _batch(n=6, dim=3, key=("next", "observation")):
    return TensorDict({key: torch.randn(n, dim)}, batch_size=[n])


def test_rnd_loss_matches_reference():
    with float64():
        torch.manual_seed(0)
        pred, target = mlp(3, 4), mlp(3, 4)
        td = _batch()
        loss = RNDLoss(pred, target)
        assert loss.in_keys == [("next", "observation")]
        assert not any(p.requires_grad for p in target.parameters())
        out = loss(td)
        obs = td["next", "observation"]
        ref = (pred(obs) - target(obs)).pow(2).mean()
        assert_matches(out["loss_rnd"], ref, list(pred.parameters()))
        out["loss_rnd"].backward()
        assert all(p.grad is None for p in target.parameters())


def test_rnd_loss_normalization_reduction_and_keys():
    torch.manual_seed(0)
    pred, target = mlp(3, 4), mlp(3, 4)
    rms = RunningMeanStd(shape=(3,))
    rms.update(torch.randn(100, 3) * 0.1 + 5.0)
    loss = RNDLoss(pred, target, obs_rms=rms, obs_clip=2.0, reduction="none")
    loss.set_keys(observation="obs")
    td = TensorDict(obs=torch.randn(2, 5, 3) * 3.0 + 5.0, batch_size=[2, 5])
    per_sample = loss(td)["loss_rnd"]
    assert per_sample.shape == (2, 5)
    x = rms.normalize(td["obs"]).clamp(-2.0, 2.0)
    assert x.abs().max() == 2.0  # the clip is exercised
    ref = (pred(x) - target(x)).pow(2).mean(-1)
    torch.testing.assert_close(per_sample, ref)
    # The loss reads the statistics, never updates them.
    count = rms.count.clone()
    loss(td)
    assert torch.equal(rms.count, count)
    total = RNDLoss(pred, target, obs_rms=rms, obs_clip=2.0, reduction="sum")
    total.set_keys(observation="obs")
    torch.testing.assert_close(total(td)["loss_rnd"], ref.sum())
    reward = loss.intrinsic_reward(td)
    assert reward.shape == (2, 5, 1) and not reward.requires_grad
    torch.testing.assert_close(reward.squeeze(-1), ref.detach())


def test_rnd_loss_trains_the_transform_predictor():
    torch.manual_seed(0)
    target, pred = mlp(3, 8, hidden=16), mlp(3, 8, hidden=16)
    rnd = RNDTransform(target, pred, normalize_reward=False)
    env = TransformedEnv(PendulumEnv(seed=0), rnd)
    data = env.rollout(50)
    loss = RNDLoss(pred, target, obs_rms=rnd.obs_rms)
    # Shared networks and statistics: the loss's error is the transform's reward.
    torch.testing.assert_close(
        loss.intrinsic_reward(data), rnd.prediction_error(data["next", "observation"]).unsqueeze(-1)
    )
    with torch.no_grad():
        before = data["next", "intrinsic_reward"].mean()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    trainable = {id(p) for p in loss.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in pred.parameters()}
    for _ in range(200):
        optim.zero_grad()
        loss(data)["loss_rnd"].backward()
        optim.step()
    rnd.eval()  # freeze the statistics: compare rewards on the same states
    after = rnd._call(data["next"].clone())["intrinsic_reward"].mean()
    assert after < 0.1 * before


def test_rnd_prediction_error_integral_obs():
    torch.manual_seed(0)
    pred, target = nn.Linear(2, 3), nn.Linear(2, 3)
    obs = torch.tensor([[1, 2], [3, 4]])
    err = rnd_prediction_error(pred, target, obs)
    x = obs.float()
    torch.testing.assert_close(err, (pred(x) - target(x)).pow(2).mean(-1).detach())
    assert err.requires_grad


def test_rnd_loss_errors():
    net = nn.Linear(3, 4)
    with pytest.raises(TypeError, match="nn.Modules"):
        RNDLoss(net, "target")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct"):
        RNDLoss(net, net)
    with pytest.raises(TypeError, match="RunningMeanStd"):
        RNDLoss(net, nn.Linear(3, 4), obs_rms=torch.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="obs_clip"):
        RNDLoss(net, nn.Linear(3, 4), obs_clip=0.0)
    with pytest.raises(ValueError, match="reduction"):
        RNDLoss(net, nn.Linear(3, 4), reduction="max")
    with pytest.raises(KeyError, match="RNDLoss.*observation"):
        RNDLoss(net, nn.Linear(3, 4))(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
