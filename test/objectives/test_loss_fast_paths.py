"""The losses' shortcuts (cached ensemble views, direct actor calls, the MLP's direct layer
calls) give the same losses, gradients and parameter updates as the generic calls."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.modules import MLP, Actor, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss, DQNLoss, SACLoss, SoftUpdate, TD3Loss
from torchrl.objectives import common as loss_common

OBS, ACT, B = 3, 2, 16


def _batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(B, 1, dtype=torch.bool)
    done[::5] = True
    return TensorDict(
        {
            "observation": torch.randn(B, OBS, generator=g),
            "action": torch.rand(B, ACT, generator=g) * 1.8 - 0.9,
            "sample_log_prob": torch.randn(B, generator=g),
            "advantage": torch.randn(B, 1, generator=g),
            "value_target": torch.randn(B, 1, generator=g),
            "next": {
                "observation": torch.randn(B, OBS, generator=g),
                "reward": torch.randn(B, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[B],
    )


def _actor() -> ProbabilisticActor:
    net = TensorDictModule(
        nn.Sequential(
            MLP(in_features=OBS, out_features=2 * ACT, depth=1, num_cells=8), NormalParamExtractor()
        ),
        ["observation"],
        ["loc", "scale"],
    )
    return ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal)


def _critic(n_in: int) -> ValueOperator:
    net = MLP(in_features=n_in, out_features=1, depth=1, num_cells=8)
    keys = ["observation", "action"] if n_in > OBS else ["observation"]
    return ValueOperator(net, in_keys=keys)


def _make(kind: str) -> tuple[nn.Module, SoftUpdate | None]:
    torch.manual_seed(0)
    if kind == "sac":
        loss = SACLoss(_actor(), _critic(OBS + ACT), num_qvalue_nets=2, target_entropy=-2.0)
    elif kind == "dqn":
        qnet = QValueActor(
            MLP(in_features=OBS, out_features=4, depth=1, num_cells=8), action_space="one_hot"
        )
        loss = DQNLoss(qnet, double_dqn=True, action_space="one_hot")
    elif kind == "td3":
        policy = Actor(MLP(in_features=OBS, out_features=ACT, depth=1, num_cells=8))
        loss = TD3Loss(policy, _critic(OBS + ACT), bounds=(-1.0, 1.0), num_qvalue_nets=2)
    else:
        loss = ClipPPOLoss(_actor(), _critic(OBS), entropy_coeff=0.01)
        loss.set_keys(sample_log_prob="sample_log_prob")
        return loss, None
    loss.make_value_estimator(gamma=0.9)
    return loss, SoftUpdate(loss, eps=0.9)


def _train(loss: nn.Module, updater: SoftUpdate | None, steps: int) -> list[dict]:
    data = _batch()
    if isinstance(loss, DQNLoss):
        data["action"] = nn.functional.one_hot(torch.arange(B) % 4, 4)
    adam = torch.optim.Adam([p for p in loss.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(1)
    record = []
    for _ in range(steps):
        adam.zero_grad()
        out = loss(data.clone(False))
        sum(v for k, v in out.items() if k.startswith("loss")).backward()
        grads = {k: p.grad.clone() for k, p in loss.named_parameters() if p.grad is not None}
        adam.step()
        if updater is not None:
            updater.step()
        record.append(
            {
                "out": {k: v.detach().clone() for k, v in out.items()},
                "grads": grads,
                "state": {k: v.detach().clone() for k, v in loss.state_dict().items()},
            }
        )
    return record


def _assert_same(a: list[dict], b: list[dict], exact: bool = True) -> None:
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
    for step_a, step_b in zip(a, b, strict=True):
        for part in ("out", "grads", "state"):
            assert step_a[part].keys() == step_b[part].keys()
            for key in step_a[part]:
                torch.testing.assert_close(step_a[part][key], step_b[part][key], **tol)


@pytest.mark.parametrize("kind", ["sac", "td3", "ppo", "dqn"])
def test_shortcuts_match_generic_calls_over_optimizer_steps(kind, monkeypatch):
    loss, updater = _make(kind)
    fast = _train(loss, updater, steps=4)
    monkeypatch.setattr(loss_common.LossModule, "_member_views", lambda self, n, p: None)

    def generic_dist(actor, td, write=True):
        return actor.get_dist(td if write else td.copy())

    monkeypatch.setattr(loss_common, "actor_dist", generic_dist)
    monkeypatch.setattr("torchrl.objectives.sac.actor_dist", generic_dist)
    monkeypatch.setattr("torchrl.objectives.ppo.actor_dist", generic_dist)
    monkeypatch.setattr("torchrl.modules.models.mlp.no_global_hooks", lambda: False)
    # The target networks then go through the slots, and DQN's Q-network through the module.
    monkeypatch.setattr(loss_common.LossModule, "_direct_output", lambda self, *args: None)
    monkeypatch.setattr("torchrl.objectives.dqn.DQNLoss._direct_q", lambda self: None)
    loss, updater = _make(kind)
    generic = _train(loss, updater, steps=4)
    # The twin critics run as one batched matmul per layer (planned_forward): float32 sums in
    # another order than two linear calls, so equal to rounding only; the rest is exact.
    _assert_same(fast, generic, exact=kind in ("ppo", "dqn"))


def test_member_views_follow_replaced_and_loaded_tensors():
    loss, _ = _make("sac")
    data = _batch()
    with torch.no_grad():
        first = loss(data.clone(False))
    state = copy.deepcopy(loss.state_dict())
    views = loss._member_views("qvalue_network", loss_common.ParamSet.TARGET)
    assert views is not None and len(views) == 2
    # In-place target updates show through the cached views.
    target = loss._leaves("target_qvalue_network_params")
    with torch.no_grad():
        for t in target:
            t.add_(1.0)
    assert loss._member_views("qvalue_network", loss_common.ParamSet.TARGET) is views
    torch.testing.assert_close(views[1][0], target[0][1], rtol=0, atol=0)
    # A new tensor behind a slot (.data assignment) is seen: new views are made.
    leaf = loss._leaves("qvalue_network_params")[0]
    leaf.data = leaf.data.clone()
    detached = loss._member_views("qvalue_network", loss_common.ParamSet.DETACHED)
    assert detached is not None and detached[0][0].data_ptr() == leaf.data_ptr()
    loss.load_state_dict(state)
    with torch.no_grad():
        torch.manual_seed(0)
        again = loss(data.clone(False))
    assert again["loss_qvalue"].shape == first["loss_qvalue"].shape


def test_mlp_direct_layers_keep_hooks_and_outputs():
    torch.manual_seed(0)
    mlp = MLP(in_features=3, out_features=2, depth=2, num_cells=5)
    x = torch.randn(4, 3)
    fast = mlp(x)
    seen = []
    handle = mlp[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    hooked = mlp(x)
    handle.remove()
    assert seen == [torch.Size([4, 5])]
    torch.testing.assert_close(fast, hooked, rtol=0, atol=0)
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: calls.append(m))
    try:
        mlp(x)
    finally:
        handle.remove()
    assert any(isinstance(m, nn.Linear) for m in calls)
    # An instance forward on a layer is honoured.
    mlp[2] = nn.Tanh()
    mlp[2].forward = lambda v: v * 0  # type: ignore[method-assign]
    assert bool((mlp(x) == mlp[4](mlp[3](torch.zeros(4, 5)))).all())


@pytest.mark.parametrize("loss_function", ["l2", "l1", "smooth_l1"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_distances_match_the_per_sample_forms(loss_function, reduction):
    from torchrl.objectives._helpers import ensemble_distance, reduced_distance
    from torchrl.objectives.utils import distance_loss

    g = torch.Generator().manual_seed(0)
    pred = (torch.randn(2, B, 1, generator=g) * 3).requires_grad_()
    target = torch.randn(B, 1, generator=g) * 3

    def reduce(x):
        return {"mean": x.mean(), "sum": x.sum(), "none": x}[reduction]

    # One critic: the fused op against distance_loss then the reduction.
    got = reduced_distance(pred[0], target, loss_function, reduction)
    want = reduce(distance_loss(pred[0], target, loss_function))
    torch.testing.assert_close(got, want)
    # An ensemble: summed over the critics, then reduced; values and gradients.
    got = ensemble_distance(pred, target, loss_function, reduction)
    want = reduce(distance_loss(pred, target.expand_as(pred), loss_function).sum(0))
    torch.testing.assert_close(got, want)
    (g_got,) = torch.autograd.grad(got.sum(), pred)
    (g_want,) = torch.autograd.grad(want.sum(), pred)
    torch.testing.assert_close(g_got, g_want)


def test_reduced_distance_keeps_the_strict_shape_check():
    from torchrl.objectives._helpers import reduced_distance

    with pytest.raises(ValueError, match="different shapes"):
        reduced_distance(torch.zeros(4, 1), torch.zeros(4), "l2", "mean")
    # Broadcast on request (the on-policy critics' [*B] targets against [*B, 1] values).
    out = reduced_distance(torch.zeros(4, 1), torch.ones(4), "l2", "mean", strict_shape=False)
    assert out.item() == 1.0


@pytest.mark.parametrize("param_set", ["ONLINE", "DETACHED", "TARGET"])
@pytest.mark.parametrize("members", [2, 3])  # on the CPU two critics are looped, three vmapped
def test_ensemble_minimum_equals_the_minimum_of_the_stack(param_set, members):
    loss, _ = _make("sac")
    data = _batch()
    which = getattr(loss_common.ParamSet, param_set)
    key = loss.tensor_keys.state_action_value
    if members == 2:  # the parameter set's own tensors (cached views, or unbound online ones)
        options: dict = {"param_set": which}
    else:
        tensors = loss.network_tensors("qvalue_network", which)
        options = {"tensors": [torch.cat([t, t[:1] * 0.5]) for t in tensors]}
    stacked = loss._call_ensemble("qvalue_network", data, [key], **options)[0]
    folded = loss._call_ensemble("qvalue_network", data, [key], minimum=True, **options)[0]
    assert stacked.shape[0] == members
    torch.testing.assert_close(folded, stacked.min(0).values, rtol=0, atol=0)


def _stacked(members: list[nn.Module], keys: list[tuple[str, ...]]) -> list[torch.Tensor]:
    params = [dict(m.named_parameters()) for m in members]
    return [torch.stack([p[".".join(k)] for p in params]).detach().requires_grad_() for k in keys]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"out_features": 1, "depth": 2},
        {"out_features": (2, 3), "depth": 1, "activation_class": nn.Sigmoid},
        {"out_features": 2, "depth": 1, "bias_last_layer": False},
        {"out_features": 2, "depth": 0},
    ],
)
@pytest.mark.parametrize("batch", [(5,), (2, 3)])
def test_planned_forward_matches_each_member(kwargs, batch):
    from torchrl.modules.models.mlp import mlp_plan, planned_forward

    torch.manual_seed(0)
    members = [MLP(in_features=4, num_cells=6, **kwargs) for _ in range(3)]
    keys = [tuple(name.split(".")) for name, _ in members[0].named_parameters()]
    plan = mlp_plan(members[0], keys)
    assert plan is not None
    tensors = _stacked(members, keys)
    obs = torch.randn(*batch, 3, requires_grad=True)
    act = torch.randn(*batch, 1)
    out = planned_forward(members[0], plan, tensors, obs, act)
    want = torch.stack([m(obs, act) for m in members])
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    # Gradients: to the stacked parameters (one member each) and to the shared input.
    weights = torch.randn_like(want)
    got = torch.autograd.grad((out * weights).sum(), [obs, *tensors])
    expected = torch.autograd.grad(
        (want * weights).sum(), [obs, *(p for m in members for p in m.parameters())]
    )
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-6)
    n_params = len(keys)
    for i, grad in enumerate(got[1:]):
        per_member = torch.stack([expected[1 + j * n_params + i] for j in range(3)])
        torch.testing.assert_close(grad, per_member, rtol=1e-5, atol=1e-6)
    # One copy's own (unstacked) tensors: exactly that member's module call.
    own = list(members[2].parameters())
    single = planned_forward(members[0], plan, own, obs, act)
    torch.testing.assert_close(single, members[2](obs, act), rtol=0, atol=0)
    got = torch.autograd.grad(single.sum(), [obs, *own])
    expected = torch.autograd.grad(members[2](obs, act).sum(), [obs, *own])
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_planned_forward_declines_what_it_cannot_run():
    from torchrl.modules.models.mlp import mlp_plan, planned_forward

    def keys_of(module):
        return [tuple(name.split(".")) for name, _ in module.named_parameters()]

    # Layers other than nn.Linear and function-only activations: no plan.
    for mlp in (
        MLP(in_features=3, out_features=1, depth=1, activation_class=nn.ReLU),
        MLP(in_features=3, out_features=1, depth=1, single_bias_last_layer=True),
        MLP(
            in_features=3,
            out_features=1,
            depth=1,
            norm_class=nn.LayerNorm,
            norm_kwargs={"normalized_shape": 32},
        ),
    ):
        assert mlp_plan(mlp, keys_of(mlp)) is None
    mlp = MLP(in_features=3, out_features=1, depth=1, num_cells=4)
    keys = keys_of(mlp)
    assert mlp_plan(mlp, keys[1:]) is None  # a weight missing from the keys
    assert mlp_plan(mlp, [*keys, ("0", "extra")]) is None  # a tensor of no layer
    # A hook on a layer: no stacked call (the caller calls the members as modules).
    plan = mlp_plan(mlp, keys)
    tensors = _stacked([mlp, mlp], keys)
    handle = mlp[0].register_forward_hook(lambda m, i, o: None)
    try:
        assert planned_forward(mlp, plan, tensors, torch.zeros(2, 3)) is None
    finally:
        handle.remove()
    assert planned_forward(mlp, plan, tensors, torch.zeros(2, 3)).shape == (2, 2, 1)


def test_ensemble_with_a_hooked_critic_layer_calls_its_members():
    loss, _ = _make("sac")
    calls = []
    template = loss.qvalue_network.module
    template[0].register_forward_hook(lambda m, i, o: calls.append(o.shape))
    with torch.no_grad():
        torch.manual_seed(0)
        hooked = loss(_batch())
    assert len(calls) == 6  # two critics, three calls (actor, target, prediction)
    loss, _ = _make("sac")
    with torch.no_grad():
        torch.manual_seed(0)
        stacked = loss(_batch())
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        torch.testing.assert_close(hooked[key], stacked[key], rtol=1e-5, atol=1e-6)


def test_direct_output_of_a_sub_module_uses_its_own_target_tensors():
    # Two MLPs in one network: the second one's tensors sit after the first one's in the
    # flat list, so its plan's positions must be remapped.
    from tensordict.nn import TensorDictSequential

    from torchrl.objectives.common import LossModule, ParamSet

    class Holder(LossModule):
        def forward(self, td):  # pragma: no cover - not called
            return td

    torch.manual_seed(0)
    first = TensorDictModule(MLP(in_features=OBS, out_features=4, depth=1), ["observation"], ["h"])
    second = TensorDictModule(MLP(in_features=4, out_features=2, depth=1), ["h"], ["out"])
    loss = Holder()
    loss.convert_to_functional(
        TensorDictSequential(first, second), "net", create_target_params=True
    )
    with torch.no_grad():
        for t in loss.network_tensors("net", ParamSet.TARGET):
            t.add_(torch.randn_like(t))
    td = TensorDict({"h": torch.randn(5, 4)}, batch_size=[5])
    out = loss._direct_output("net", td, ParamSet.TARGET, second)
    assert loss._mlp_plan("net", second) is not None  # the planned path, not the slot swap
    with loss.using_tensors("net", loss.network_tensors("net", ParamSet.TARGET)):
        expected = second.module(td["h"])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert not torch.equal(out, second.module(td["h"]))  # the online tensors differ
    assert "out" not in td.keys()  # nothing written


def _tanh_normal_actor(*param_modules: TensorDictModule) -> ProbabilisticActor:
    params = param_modules[0] if len(param_modules) == 1 else TensorDictSequential(*param_modules)
    return ProbabilisticActor(params, in_keys=["loc", "scale"], distribution_class=TanhNormal)


@pytest.mark.parametrize("two_modules", [False, True])
def test_actor_dist_without_writes_leaves_the_input_and_matches(two_modules):
    torch.manual_seed(0)
    if two_modules:
        # A trunk writing a hidden entry, then a head: the writes go to a shallow copy.
        actor = _tanh_normal_actor(
            TensorDictModule(nn.Linear(OBS, 8), ["observation"], ["hidden"]),
            TensorDictModule(
                nn.Sequential(nn.Linear(8, 2 * ACT), NormalParamExtractor()),
                ["hidden"],
                ["loc", "scale"],
            ),
        )
    else:
        actor = _tanh_normal_actor(
            TensorDictModule(
                nn.Sequential(MLP(in_features=OBS, out_features=2 * ACT), NormalParamExtractor()),
                ["observation"],
                ["loc", "scale"],
            )
        )
    data = _batch()
    keys = set(data.keys(True, True))
    dist = loss_common.actor_dist(actor, data, write=False)
    assert set(data.keys(True, True)) == keys  # nothing written
    written = data.copy()
    reference = loss_common.actor_dist(actor, written)
    assert "loc" in written.keys() and "scale" in written.keys()
    assert type(dist) is type(reference)
    torch.testing.assert_close(dist.loc, reference.loc, rtol=0, atol=0)
    torch.testing.assert_close(dist.scale, reference.scale, rtol=0, atol=0)
    # Gradients reach the actor's parameters through the unwritten parameters.
    dist.log_prob(data["action"]).sum().backward()
    assert all(p.grad is not None for p in actor.parameters())
