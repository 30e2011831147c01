"""Flow Q-Learning: the flow and one-step models, and FQLLoss (Park, Li and Levine, 2025)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.modules import MLP, ValueOperator
from torchrl.modules.models.flow import FlowMatchingModel, OneStepModel
from torchrl.objectives import SoftUpdate
from torchrl.objectives.fql import FQLLoss

OBS, ACT = 2, 1


def _flow(obs_dim=OBS, act_dim=ACT, cells=64, in_keys=("observation",), steps=10):
    net = MLP(in_features=obs_dim + act_dim + 1, out_features=act_dim, num_cells=cells, depth=2)
    model = FlowMatchingModel(net, act_dim, steps)
    return TensorDictModule(model, list(in_keys), ["action"])


def _actor(obs_dim=OBS, act_dim=ACT, cells=64, in_keys=("observation",)):
    net = MLP(in_features=obs_dim + act_dim, out_features=act_dim, num_cells=cells, depth=2)
    return TensorDictModule(OneStepModel(net, act_dim), list(in_keys), ["action"])


def _critic(obs_dim=OBS, act_dim=ACT):
    return ValueOperator(
        MLP(in_features=obs_dim + act_dim, out_features=1, num_cells=16, depth=1),
        in_keys=["observation", "action"],
    )


def _zero_critics(obs_dim=OBS, act_dim=ACT):
    """Two critics with Q = 0 everywhere: the actor loss is then the distillation alone.

    (A single critic would be copied with freshly drawn weights for the second member.)
    """
    critics = []
    for _ in range(2):
        linear = MLP(in_features=obs_dim + act_dim, out_features=1, depth=0)
        for p in linear.parameters():
            nn.init.zeros_(p)
        critics.append(ValueOperator(linear, in_keys=["observation", "action"]))
    return critics


def _bimodal_batch(n, generator, obs_dim=OBS):
    """Actions at -0.6 or +0.6 (equal odds, small spread), observation all zeros."""
    sign = torch.randint(0, 2, (n, 1), generator=generator) * 2.0 - 1.0
    action = 0.6 * sign + 0.03 * torch.randn(n, 1, generator=generator)
    false = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        observation=torch.zeros(n, obs_dim),
        action=action,
        next=TensorDict(
            observation=torch.zeros(n, obs_dim),
            reward=torch.zeros(n, 1),
            done=false,
            terminated=false,
        ),
        batch_size=[n],
    )


def _mode_fractions(actions):
    near_plus = ((actions - 0.6).abs() < 0.2).float().mean().item()
    near_minus = ((actions + 0.6).abs() < 0.2).float().mean().item()
    between = (actions.abs() < 0.3).float().mean().item()
    return near_plus, near_minus, between


@pytest.fixture(scope="module")
def trained_bimodal():
    """Flow trained by BC on bimodal data, then a one-step student distilled from it."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    loss = FQLLoss(_flow(), _actor(), _zero_critics(), alpha=1.0)
    flow_opt = torch.optim.Adam(loss.flow_policy.parameters(), lr=3e-3)
    for _ in range(600):
        out = loss.flow_loss(_bimodal_batch(256, g)).mean()
        flow_opt.zero_grad()
        out.backward()
        flow_opt.step()
    actor_opt = torch.optim.Adam(loss.actor_network.parameters(), lr=3e-3)
    for _ in range(400):
        out, _ = loss.actor_loss(_bimodal_batch(256, g))
        actor_opt.zero_grad()
        out.mean().backward()
        actor_opt.step()
    return loss


def test_flow_model_fits_bimodal_actions(trained_bimodal):
    flow: FlowMatchingModel = trained_bimodal.flow_policy.module
    with torch.no_grad():
        actions = flow(torch.zeros(2000, OBS))
    plus, minus, between = _mode_fractions(actions)
    assert plus > 0.3 and minus > 0.3, (plus, minus)
    assert between < 0.1, between
    assert actions.abs().max() <= 1.0


def test_one_step_model_distils_the_flow(trained_bimodal):
    flow: FlowMatchingModel = trained_bimodal.flow_policy.module
    student: OneStepModel = trained_bimodal.actor_network.module
    noise = torch.randn(2000, ACT)
    obs = torch.zeros(2000, OBS)
    with torch.no_grad():
        teacher_actions = flow(obs, noise)
        student_actions = student(obs, noise)
    assert (student_actions - teacher_actions).pow(2).mean() < 0.02
    plus, minus, between = _mode_fractions(student_actions)
    assert plus > 0.3 and minus > 0.3, (plus, minus)
    assert between < 0.15, between


def test_models_clip_and_check_arguments():
    flow = FlowMatchingModel(nn.Linear(OBS + ACT + 1, ACT), ACT, 3, low=-0.2, high=0.1)
    out = flow(torch.zeros(5, OBS), noise=torch.full((5, ACT), 10.0))
    assert torch.equal(out, torch.full((5, ACT), 0.1))
    one = OneStepModel(nn.Identity(), ACT, low=-0.5, high=0.5)
    obs, noise = torch.zeros(3, 0), torch.tensor([[-2.0], [0.2], [3.0]])
    assert torch.equal(one(obs, noise), torch.tensor([[-0.5], [0.2], [0.5]]))
    assert torch.equal(one(obs, noise, clamp=False), noise)
    # drawn noise has the action shape
    assert one(torch.zeros(7, 0)).shape == (7, ACT)
    with pytest.raises(ValueError, match="strictly less"):
        OneStepModel(nn.Identity(), ACT, low=1.0, high=1.0)
    with pytest.raises(ValueError, match="num_steps"):
        FlowMatchingModel(nn.Identity(), ACT, 0)
    with pytest.raises(ValueError, match="action_dim=1"):
        one(torch.zeros(3, 0), torch.zeros(3, 2))


def test_flow_model_euler_steps_match_hand_integration():
    # v = 1 - x (constant in t): n Euler steps give x_n = 1 - (1 - 1/n)^n (1 - x_0).
    class Relax(nn.Module):
        def forward(self, inp):
            return 1 - inp[..., 1:2]

    flow = FlowMatchingModel(Relax(), 1, 4, low=-5.0, high=5.0)
    x0 = torch.tensor([[-1.0], [0.5]])
    out = flow(torch.zeros(2, 1), x0)
    torch.testing.assert_close(out, 1 - (1 - 0.25) ** 4 * (1 - x0))


def _data(n=16, seed=0, noise=False):
    g = torch.Generator().manual_seed(seed)
    data = TensorDict(
        observation=torch.randn(n, OBS, generator=g),
        action=torch.rand(n, ACT, generator=g) * 2 - 1,
        next=TensorDict(
            observation=torch.randn(n, OBS, generator=g),
            reward=torch.randn(n, 1, generator=g),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
        ),
        batch_size=[n],
    )
    if noise:
        data["noise"] = torch.randn(n, ACT, generator=g)
        data["next", "noise"] = torch.randn(n, ACT, generator=g)
    return data


def _grad_reaches(loss_value, params):
    grads = torch.autograd.grad(loss_value, params, retain_graph=True, allow_unused=True)
    return [g is not None and bool(g.abs().sum() > 0) for g in grads]


def test_loss_keys_and_gradients_reach_the_right_networks():
    torch.manual_seed(0)
    loss = FQLLoss(_flow(cells=8), _actor(cells=8), _critic())
    out = loss(_data())
    assert {k for k in out.keys() if k.startswith("loss_")} == {
        "loss_flow",
        "loss_actor",
        "loss_qvalue",
    }
    assert set(loss.out_keys) <= set(out.keys())
    assert all(out[k].shape == () for k in loss.out_keys)
    assert not any(out[k].requires_grad for k in loss.out_keys if not k.startswith("loss_"))
    flow = list(loss.flow_policy.parameters())
    actor = list(loss.actor_network.parameters())
    critic = list(loss.qvalue_network_params.values(True, True))
    groups = {"flow": flow, "actor": actor, "critic": critic}
    expected = {"loss_flow": "flow", "loss_actor": "actor", "loss_qvalue": "critic"}
    for key, owner in expected.items():
        for name, params in groups.items():
            reached = _grad_reaches(out[key], params)
            if name == owner:
                assert all(reached), (key, name)
            else:
                assert not any(reached), (key, name)
    assert not any(p.requires_grad for p in loss.target_qvalue_network_params.values(True, True))
    assert loss.target_network_names == ["qvalue_network"]


@pytest.mark.parametrize("aggregation", ["mean", "min"])
def test_critic_target_matches_hand_computation(aggregation):
    torch.manual_seed(1)
    in_keys = ("observation", "noise")
    loss = FQLLoss(
        _flow(cells=8, in_keys=in_keys),
        _actor(cells=8, in_keys=in_keys),
        _critic(),
        num_qvalue_nets=3,
        q_aggregation=aggregation,
    )
    loss.make_value_estimator(gamma=0.9)
    data = _data(noise=True)
    data["next", "terminated"][::3] = True
    data["next", "done"] = data["next", "terminated"].clone()
    out = loss(data.clone())
    student: OneStepModel = loss.actor_network.module
    next_obs = data["next", "observation"]
    next_action = student(next_obs, data["next", "noise"])
    params = loss.target_qvalue_network_params
    values = []
    for i in range(3):
        w0, b0 = params["module", "0", "weight"][i], params["module", "0", "bias"][i]
        w1, b1 = params["module", "2", "weight"][i], params["module", "2", "bias"][i]
        hidden = torch.tanh(torch.cat([next_obs, next_action], -1) @ w0.T + b0)
        values.append(hidden @ w1.T + b1)
    stacked = torch.stack(values)
    next_value = stacked.mean(0) if aggregation == "mean" else stacked.min(0).values
    not_term = (~data["next", "terminated"]).float()
    target = data["next", "reward"] + 0.9 * not_term * next_value
    torch.testing.assert_close(out["target_value"], target.mean())


def test_tiny_offline_run_lowers_the_losses():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    loss = FQLLoss(_flow(cells=32), _actor(cells=32), _critic(), alpha=10.0)
    loss.make_value_estimator(gamma=0.5)
    updater = SoftUpdate(loss, tau=0.05)
    dataset = _bimodal_batch(512, g)
    dataset["observation"] = torch.randn(512, OBS, generator=g)
    dataset["next", "observation"] = torch.randn(512, OBS, generator=g)
    dataset["next", "reward"] = -dataset["action"].abs()
    optim = torch.optim.Adam(loss.parameters(), lr=3e-3)

    def evaluate():
        torch.manual_seed(123)
        with torch.no_grad():
            outs = [loss(dataset.clone()) for _ in range(4)]
        return {
            k: sum(o[k] for o in outs) / 4 for k in ("loss_flow", "loss_qvalue", "distillation")
        }

    before = evaluate()
    for _ in range(150):
        batch = dataset[torch.randint(0, 512, (128,), generator=g)]
        out = loss(batch)
        total = out["loss_flow"] + out["loss_actor"] + out["loss_qvalue"]
        optim.zero_grad()
        total.backward()
        optim.step()
        updater.step()
    after = evaluate()
    # the flow-matching loss keeps an irreducible part (the spread of a - z given x_t)
    assert after["loss_flow"] < 0.85 * before["loss_flow"], (before, after)
    assert after["loss_qvalue"] < 0.5 * before["loss_qvalue"], (before, after)
    assert after["distillation"] < before["distillation"], (before, after)


def test_critic_list_encoders_reduction_and_keys():
    torch.manual_seed(0)
    critics = [_critic(), _critic()]
    encoder = TensorDictModule(nn.Linear(OBS, 4), ["observation"], ["hidden"])
    flow = TensorDictSequential(encoder, _flow(obs_dim=4, cells=8, in_keys=("hidden",)))
    actor = _actor(cells=8)
    loss = FQLLoss(flow, actor, critics, reduction="none")
    weights = loss.qvalue_network_params["module", "0", "weight"]
    assert torch.equal(weights[1], critics[1].module[0].weight)
    assert torch.equal(loss.target_qvalue_network_params["module", "0", "weight"][0], weights[0])
    out = loss(_data(n=6))
    assert out["loss_flow"].shape == out["loss_actor"].shape == out["loss_qvalue"].shape == (6,)
    # the encoder belongs to the flow policy: trained by the flow loss only
    assert all(_grad_reaches(out["loss_flow"].sum(), list(encoder.parameters())))
    assert not any(_grad_reaches(out["loss_actor"].sum(), list(encoder.parameters())))
    loss.set_keys(reward="r")
    assert ("next", "r") in loss.in_keys and ("next", "reward") not in loss.in_keys
    with pytest.raises(KeyError, match="no entry"):
        loss(_data(n=6))


def test_loss_argument_errors():
    plain = TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"])
    with pytest.raises(TypeError, match="FlowMatchingModel"):
        FQLLoss(plain, _actor(), _critic())
    with pytest.raises(TypeError, match="OneStepModel"):
        FQLLoss(_flow(), _flow(), _critic())
    with pytest.raises(ValueError, match="q_aggregation"):
        FQLLoss(_flow(), _actor(), _critic(), q_aggregation="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reduction"):
        FQLLoss(_flow(), _actor(), _critic(), reduction="avg")


def _linear_critics(weight_on_action: float, n: int = 2):
    """``n`` critics ``Q(s, a) = weight_on_action * a`` (the actor's loss does not train them)."""
    return [_linear_critic(weight_on_action) for _ in range(n)]


def _linear_critic(weight_on_action: float):
    linear = MLP(in_features=OBS + ACT, out_features=1, depth=0)
    with torch.no_grad():
        linear[0].weight.zero_()
        linear[0].weight[0, OBS:] = weight_on_action
        linear[0].bias.zero_()
    return ValueOperator(linear, in_keys=["observation", "action"])


def test_actor_maximises_q_within_the_behaviour_support(trained_bimodal):
    # The behaviour data has two modes; a critic preferring large actions should move the
    # student onto the upper mode rather than spreading it between the two.
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    flow = trained_bimodal.flow_policy
    loss = FQLLoss(flow, _actor(), _linear_critics(3.0), alpha=1.0)
    optim = torch.optim.Adam(loss.actor_network.parameters(), lr=3e-3)
    for _ in range(300):
        out, _ = loss.actor_loss(_bimodal_batch(256, g))
        optim.zero_grad()
        out.mean().backward()
        optim.step()
    with torch.no_grad():
        actions = loss.actor_network.module(torch.zeros(2000, OBS))
    _, minus, _ = _mode_fractions(actions)
    assert minus < 0.05, minus
    assert actions.mean() > 0.4


@pytest.mark.parametrize("normalize", [False, True])
def test_actor_loss_combines_distillation_and_q(normalize):
    torch.manual_seed(0)
    in_keys = ("observation", "noise")
    loss = FQLLoss(
        _flow(cells=8, in_keys=in_keys),
        _actor(cells=8, in_keys=in_keys),
        _linear_critics(2.0),
        alpha=3.0,
        normalize_q_loss=normalize,
    )
    data = _data(noise=True)
    out = loss(data.clone())
    flow: FlowMatchingModel = loss.flow_policy.module
    actor: OneStepModel = loss.actor_network.module
    with torch.no_grad():
        raw = actor(data["observation"], data["noise"], clamp=False)
        teacher = flow(data["observation"], data["noise"])
    q = 2.0 * raw.clamp(-1, 1)
    distill = (raw - teacher).pow(2).mean()
    q_term = -q.mean() / q.abs().mean() if normalize else -q.mean()
    torch.testing.assert_close(out["distillation"], distill)
    torch.testing.assert_close(out["state_action_value_actor"], q.mean())
    torch.testing.assert_close(out["loss_actor"], 3.0 * distill + q_term)


def test_fql_trainer_offline():
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.trainers.algorithms import FQLTrainer, OfflineIterations

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    loss = FQLLoss(_flow(cells=16), _actor(cells=16), _critic(), alpha=10.0)
    data = _bimodal_batch(256, g)
    data["observation"] = torch.randn(256, OBS, generator=g)
    data["next", "observation"] = torch.randn(256, OBS, generator=g)
    dataset = ReplayBuffer(storage=LazyTensorStorage(256))
    dataset.extend(data)
    before = [p.detach().clone() for p in loss.flow_policy.parameters()]
    trainer = FQLTrainer(
        collector=None,
        total_frames=8,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        replay_buffer=dataset,
        batch_size=32,
        target_net_updater=SoftUpdate(loss, tau=0.05),
        progress_bar=False,
    )
    assert isinstance(trainer.collector, OfflineIterations)
    trainer.train()
    assert len(dataset) == 256  # the dataset is only read
    moved = [not torch.equal(a, b) for a, b in zip(before, loss.flow_policy.parameters())]
    assert any(moved)
    assert {"loss_flow", "loss_actor", "loss_qvalue"} <= set(trainer.latest_logs)
