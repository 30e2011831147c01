"""DiffusionActor (DDPM reverse chain) and DiffusionBCLoss (noise prediction)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from torchrl.data import Bounded
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, Actor
from torchrl.modules.tensordict_module.diffusion import DiffusionActor
from torchrl.objectives import BCLoss
from torchrl.objectives.diffusion_bc import DiffusionBCLoss


def _obs(*batch: int, dim: int = 3) -> TensorDict:
    return TensorDict(observation=torch.randn(*batch, dim), batch_size=list(batch))


class _Recorder(nn.Module):
    """A score network that records its inputs and predicts zero noise."""

    def __init__(self, action_dim: int) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.scale = nn.Parameter(torch.zeros(()))
        self.inputs: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(x.detach().clone())
        return self.scale * x[..., : self.action_dim]


def test_actor_writes_bounded_actions_for_any_batch_shape():
    actor = DiffusionActor(2, obs_dim=3, num_steps=5, spec=Bounded(-2.0, 2.0, (2,)))
    td = actor(_obs(4, 3))
    assert td["action"].shape == (4, 3, 2)
    assert td["action"].abs().max() <= 2.0
    assert actor.in_keys == ["observation"] and actor.out_keys == ["action"]
    assert actor.num_steps == 5


def test_actor_custom_keys_and_several_observations():
    actor = DiffusionActor(
        1, obs_dim=5, num_steps=3, in_keys=["a", ("b", "c")], out_keys=[("agent", "act")]
    )
    td = TensorDict(a=torch.randn(6, 2), b=TensorDict(c=torch.randn(6, 3), batch_size=[6]))
    td.batch_size = [6]
    out = actor(td)
    assert out["agent", "act"].shape == (6, 1)


def test_reverse_chain_calls_the_network_once_per_step_with_the_documented_input():
    net = _Recorder(2)
    actor = DiffusionActor(2, score_network=net, num_steps=4)
    with set_exploration_type(ExplorationType.RANDOM):
        actor(_obs(5))
    assert len(net.inputs) == 4
    assert [x.shape for x in net.inputs] == [torch.Size([5, 2 + 3 + 1])] * 4
    # The raw integer steps, last column, from num_steps - 1 down to 0.
    assert [x[0, -1].item() for x in net.inputs] == [3.0, 2.0, 1.0, 0.0]


def test_zero_noise_prediction_gives_the_posterior_chain():
    # With eps = 0 the predicted clean latent is x_t / sqrt(abar_t); from a zero latent the
    # deterministic chain stays at zero, so the action is the middle of the bounds.
    actor = DiffusionActor(1, score_network=_Recorder(1), num_steps=6, spec=Bounded(0.0, 4.0, (1,)))
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = actor(_obs(3))["action"]
    torch.testing.assert_close(out, torch.full((3, 1), 2.0))


def test_deterministic_mode_is_repeatable_and_random_mode_samples():
    actor = DiffusionActor(2, obs_dim=3, num_steps=5)
    td = _obs(8)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        a = actor(td.clone())["action"]
        b = actor(td.clone())["action"]
    torch.testing.assert_close(a, b)
    with set_exploration_type(ExplorationType.RANDOM):
        c = actor(td.clone())["action"]
        d = actor(td.clone())["action"]
    assert not torch.allclose(c, d)


def test_schedule_and_forward_process():
    actor = DiffusionActor(
        1, obs_dim=2, num_steps=10, beta_start=0.01, beta_end=0.1, spec=Bounded(-2.0, 2.0, (1,))
    )
    ddpm = actor.module
    betas = torch.linspace(0.01, 0.1, 10, dtype=torch.float64)
    torch.testing.assert_close(ddpm.alphas_cumprod, torch.cumprod(1 - betas, 0).float())
    action = torch.tensor([[1.0], [-2.0]])
    noise = torch.tensor([[0.5], [-1.0]])
    t = torch.tensor([0, 9])
    noisy, returned = ddpm.add_noise(action, t, noise)
    abar = torch.cumprod(1 - betas, 0).float()[t].unsqueeze(-1)
    latent = action / 2.0  # [-2, 2] -> [-1, 1]
    torch.testing.assert_close(noisy, abar.sqrt() * latent + (1 - abar).sqrt() * noise)
    assert returned is noise
    torch.testing.assert_close(ddpm.from_latent(ddpm.to_latent(action)), action)


def test_actor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="action_dim"):
        DiffusionActor(0, obs_dim=2)
    with pytest.raises(ValueError, match="num_steps"):
        DiffusionActor(1, obs_dim=2, num_steps=0)
    with pytest.raises(ValueError, match="beta"):
        DiffusionActor(1, obs_dim=2, beta_start=0.5, beta_end=0.1)
    with pytest.raises(ValueError, match="one action key"):
        DiffusionActor(1, obs_dim=2, out_keys=["a", "b"])


def test_loss_matches_hand_computation():
    actor = DiffusionActor(2, obs_dim=3, num_steps=7, spec=Bounded(-1.0, 1.0, (2,)))
    loss = DiffusionBCLoss(actor)
    td = TensorDict(observation=torch.randn(6, 3), action=torch.rand(6, 2) * 2 - 1, batch_size=[6])
    torch.manual_seed(3)
    out = loss(td)["loss_diffusion_bc"]
    torch.manual_seed(3)
    t = torch.randint(0, 7, (6,))
    noise = torch.randn(6, 2)
    abar = actor.module.alphas_cumprod[t].unsqueeze(-1)
    noisy = abar.sqrt() * td["action"] + (1 - abar).sqrt() * noise
    pred = actor.module.score_network(torch.cat([noisy, td["observation"], t[:, None].float()], -1))
    torch.testing.assert_close(out, ((pred - noise) ** 2).mean())
    out.backward()
    assert all(p.grad is not None for p in actor.parameters())


def test_loss_reductions_keys_and_errors():
    actor = DiffusionActor(2, obs_dim=3, num_steps=4)
    td = TensorDict(obs=torch.randn(2, 5, 3), expert=torch.randn(2, 5, 2), batch_size=[2, 5])
    loss = DiffusionBCLoss(actor, reduction="none").set_keys(observation="obs", action="expert")
    assert loss.in_keys == ["obs", "expert"]
    assert loss(td)["loss_diffusion_bc"].shape == (2, 5)
    summed = DiffusionBCLoss(actor, reduction="sum").set_keys(observation="obs", action="expert")
    assert summed(td)["loss_diffusion_bc"].shape == ()
    with pytest.raises(KeyError, match="expert"):
        loss(TensorDict(obs=torch.randn(4, 3), batch_size=[4]))
    with pytest.raises(TypeError, match="add_noise"):
        DiffusionBCLoss(Actor(nn.Linear(3, 2)))
    with pytest.raises(ValueError, match="reduction"):
        DiffusionBCLoss(actor, reduction="max")


def test_lazy_default_network_initialises_from_the_first_batch():
    actor = DiffusionActor(1, num_steps=3)
    loss = DiffusionBCLoss(actor)
    td = TensorDict(observation=torch.randn(5, 4), action=torch.randn(5, 1), batch_size=[5])
    loss(td)["loss_diffusion_bc"].backward()
    first = next(iter(actor.score_network.parameters()))
    assert first.shape == (256, 1 + 4 + 16)  # action, observation, step embedding
    assert first.grad is not None


def _bimodal(n: int) -> TensorDict:
    # Whatever the observation, the expert goes to -0.8 or +0.8 with equal probability.
    sign = torch.randint(0, 2, (n, 1)).float() * 2 - 1
    return TensorDict(
        observation=torch.rand(n, 1) * 2 - 1,
        action=0.8 * sign + 0.05 * torch.randn(n, 1),
        batch_size=[n],
    )


def _fit(loss, data: TensorDict, steps: int, lr: float) -> None:
    optim = torch.optim.Adam(loss.parameters(), lr)
    for _ in range(steps):
        batch = data[torch.randint(0, data.shape[0], (128,))]
        value = sum(v for k, v in loss(batch).items() if k.startswith("loss_"))
        optim.zero_grad()
        value.backward()
        optim.step()


def test_diffusion_fits_a_bimodal_expert_where_mse_bc_averages():
    data = _bimodal(512)
    probe = TensorDict(observation=torch.rand(400, 1) * 2 - 1, batch_size=[400])

    diffusion = DiffusionActor(
        1, obs_dim=1, num_steps=20, beta_end=0.3, spec=Bounded(-1.0, 1.0, (1,)), num_cells=(64, 64)
    )
    _fit(DiffusionBCLoss(diffusion), data, steps=800, lr=3e-3)
    mse = Actor(MLP(1, 1, num_cells=[64, 64]))
    _fit(BCLoss(mse), data, steps=400, lr=3e-3)

    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        sampled = diffusion(probe.clone())["action"]
        regressed = mse(probe.clone())["action"]
    near_mode = lambda a: ((a.abs() - 0.8).abs() < 0.25).float().mean().item()  # noqa: E731
    # The diffusion policy puts its samples on the two modes, in about equal shares...
    assert near_mode(sampled) > 0.8
    assert 0.3 < (sampled > 0).float().mean().item() < 0.7
    # ... while the MSE regression predicts their mean, an action the expert never takes.
    assert near_mode(regressed) < 0.05
    assert regressed.abs().max() < 0.3


def test_batched_spec_bounds_are_read_once_and_must_agree():
    spec = Bounded(-2.0, 2.0, (4, 1))  # the action spec of 4 batched envs
    actor = DiffusionActor(1, obs_dim=3, num_steps=2, spec=spec)
    torch.testing.assert_close(actor.module.high, torch.tensor([2.0]))
    assert actor(_obs(7))["action"].abs().max() <= 2.0
    uneven = Bounded(torch.tensor([[-1.0], [-2.0]]), torch.tensor([[1.0], [2.0]]), (2, 1))
    with pytest.raises(ValueError, match="differ"):
        DiffusionActor(1, obs_dim=3, spec=uneven)
