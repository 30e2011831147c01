"""``make_update_step``: the eager step against a hand-written loop, the compiled step against
the eager one, the eager fallback and the errors.

Compiled steps use ``backend="aot_eager"`` (dynamo and AOTAutograd without code generation:
the same operations and random draws as eager, no C++ compile), so that a difference points at
our plumbing (functional Adam on the optimizer's state, the traced backward, the Polyak update
in the graph). Compiled and eager agree to ~1e-7 here; the tolerance is 1e-5.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from torchrl.modules import MLP, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss, DQNLoss, HardUpdate, SACLoss, SoftUpdate
from torchrl.objectives._update_step import make_update_step

OBS, ACT, BATCH, CELLS = 3, 2, 8, 8
TOL = {"atol": 1e-5, "rtol": 1e-5}
AOT = {"backend": "aot_eager"}


def _mlp(n_in: int, n_out: int, cells: int = CELLS) -> nn.Module:
    return MLP(in_features=n_in, out_features=n_out, num_cells=[cells, cells])


def _actor(cells: int) -> ProbabilisticActor:
    net = TensorDictModule(
        nn.Sequential(_mlp(OBS, 2 * ACT, cells), NormalParamExtractor()),
        ["observation"],
        ["loc", "scale"],
    )
    return ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal)


def _transitions(gen: torch.Generator, action: torch.Tensor) -> TensorDict:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    done = torch.zeros(BATCH, 1, dtype=torch.bool)
    done[::3] = True
    return TensorDict(
        {
            "observation": rand(BATCH, OBS),
            "action": action,
            "next": {
                "observation": rand(BATCH, OBS),
                "reward": rand(BATCH, 1),
                "done": done,
                "terminated": done.clone(),
            },
        },
        [BATCH],
    )


def _build(algo: str, cells: int = CELLS) -> tuple:
    """``(loss, updater, batches)``: the same networks and data for a given ``algo``."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if algo == "sac":
        qvalue = ValueOperator(_mlp(OBS + ACT, 1, cells), in_keys=["observation", "action"])
        loss = SACLoss(_actor(cells), qvalue, num_qvalue_nets=2, target_entropy=-float(ACT))
        loss.make_value_estimator(gamma=0.99)
        updater = SoftUpdate(loss, tau=0.05)
        batches = [
            _transitions(gen, torch.rand(BATCH, ACT, generator=gen) * 1.8 - 0.9) for _ in range(3)
        ]
    elif algo == "ppo":
        loss = ClipPPOLoss(_actor(cells), ValueOperator(_mlp(OBS, 1, cells)), entropy_coeff=0.01)
        updater = None
        batches = []
        for _ in range(3):
            td = _transitions(gen, torch.rand(BATCH, ACT, generator=gen) * 1.8 - 0.9)
            td["sample_log_prob"] = torch.randn(BATCH, generator=gen) * 0.1 - 1.0
            td["advantage"] = torch.randn(BATCH, 1, generator=gen)
            td["value_target"] = torch.randn(BATCH, 1, generator=gen)
            batches.append(td)
    else:
        qnet = QValueActor(_mlp(OBS, 4, cells), action_space="categorical")
        loss = DQNLoss(qnet, delay_value=True, action_space="categorical")
        loss.make_value_estimator(gamma=0.99)
        updater = SoftUpdate(loss, tau=0.1)
        batches = [_transitions(gen, torch.randint(4, (BATCH,), generator=gen)) for _ in range(3)]
    return loss, updater, batches


def _train(algo: str, compiled: bool, optim_cls=torch.optim.Adam, **kwargs) -> tuple:
    loss, updater, batches = _build(algo)
    optim = optim_cls(loss.parameters(), lr=1e-2)
    step = make_update_step(
        loss, optim, updater, compile=compiled, compile_options=AOT if compiled else None, **kwargs
    )
    torch.manual_seed(2)
    outs = [step(batch.clone()) for batch in batches]
    return loss, optim, outs


def _assert_same_training(a: tuple, b: tuple) -> None:
    loss_a, optim_a, outs_a = a
    loss_b, optim_b, outs_b = b
    for out_a, out_b in zip(outs_a, outs_b):
        assert out_a.keys() == out_b.keys()
        for key in out_a.keys():
            if key.startswith("loss") or key == "grad_norm":
                torch.testing.assert_close(out_b[key], out_a[key], **TOL, msg=key)
    state_a, state_b = loss_a.state_dict(), loss_b.state_dict()  # parameters and targets
    assert state_a.keys() == state_b.keys()
    for key, value in state_a.items():
        torch.testing.assert_close(state_b[key], value, **TOL, msg=key)
    adam_a, adam_b = optim_a.state_dict()["state"], optim_b.state_dict()["state"]
    assert adam_a.keys() == adam_b.keys()
    for idx, state in adam_a.items():
        for name, value in state.items():
            # a compiled step on a GPU keeps its step counts there (eager: on the CPU)
            torch.testing.assert_close(adam_b[idx][name].cpu(), value.cpu(), **TOL, msg=name)
    assert all(p.grad is None for p in loss_b.parameters())


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("algo", ["dqn", pytest.param("sac", marks=pytest.mark.slow), "ppo"])
def test_compiled_matches_eager(algo: str) -> None:
    """Losses, parameters, target parameters and Adam state over 3 steps."""
    _assert_same_training(_train(algo, False), _train(algo, True))


def test_compiled_step_is_one_graph() -> None:
    """Loss, backward, Adam and the Polyak update in one graph: no graph break, one frame."""
    import torch._dynamo

    torch._dynamo.utils.counters.clear()
    _train("dqn", True)
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
    assert torch._dynamo.utils.counters["frames"]["ok"] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_compiled_matches_eager_cuda(algo: str) -> None:
    """On a GPU the Adam step counts live on the device (capturable functional adam)."""

    def run(compiled: bool) -> tuple:
        loss, updater, batches = _build(algo)
        loss = loss.to("cuda")
        optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
        step = make_update_step(
            loss, optim, updater, compile=compiled, compile_options=AOT if compiled else None
        )
        torch.manual_seed(2)
        return loss, optim, [step(b.clone().to("cuda")) for b in batches]

    _assert_same_training(run(False), run(True))


def test_compiled_adamw_amsgrad_clipping_matches_eager() -> None:
    def adamw(params, lr):
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.1, amsgrad=True)

    eager = _train("dqn", False, adamw, max_grad_norm=0.05)
    compiled = _train("dqn", True, adamw, max_grad_norm=0.05)
    _assert_same_training(eager, compiled)
    assert all("max_exp_avg_sq" in s for s in compiled[1].state.values())
    assert float(eager[2][0]["grad_norm"]) > 0.05  # the clipping did something


def test_compiled_other_optimizer_and_hard_update() -> None:
    """SGD steps eagerly after the compiled gradients; HardUpdate runs eagerly too."""

    def run(compiled: bool) -> tuple:
        loss, _, batches = _build("dqn")
        optim = torch.optim.SGD(loss.parameters(), lr=0.1, momentum=0.9)
        updater = HardUpdate(loss, value_network_update_interval=2)
        step = make_update_step(
            loss, optim, updater, compile=compiled, compile_options=AOT if compiled else None
        )
        outs = [step(b.clone()) for b in batches]
        return loss, optim, outs

    _assert_same_training(run(False), run(True))


def test_eager_step_matches_hand_written_loop() -> None:
    loss, updater, batches = _build("sac")
    optim = torch.optim.AdamW(loss.parameters(), lr=1e-2)
    torch.manual_seed(2)
    outs = []
    for batch in batches:
        out = loss(batch.clone())
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        norm = torch.nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        updater.step()
        outs.append(out.detach().set("grad_norm", norm))
    expected = (loss, optim, outs)

    loss, updater, batches = _build("sac")
    optim = torch.optim.AdamW(loss.parameters(), lr=1e-2)
    step = make_update_step(loss, optim, updater, max_grad_norm=0.5)
    torch.manual_seed(2)
    got = (loss, optim, [step(b.clone()) for b in batches])
    _assert_same_training(expected, got)
    assert not got[2][0]["loss_actor"].requires_grad


def test_loss_keys_selects_terms() -> None:
    """Only the named terms are back-propagated: the critic alone leaves the actor unchanged."""
    loss, _, batches = _build("ppo")
    actor = [p.detach().clone() for p in loss.actor_network.parameters()]
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    step = make_update_step(loss, optim, loss_keys=["loss_critic"], return_losses=False)
    assert step(batches[0]) is None
    assert all(torch.equal(a, p) for a, p in zip(actor, loss.actor_network.parameters()))


def test_learning_rate_changes_are_seen_without_recompiling() -> None:
    import torch._dynamo

    def run(compiled: bool) -> tuple:
        loss, updater, batches = _build("dqn")
        optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(optim, step_size=1, gamma=0.1)
        step = make_update_step(
            loss, optim, updater, compile=compiled, compile_options=AOT if compiled else None
        )
        outs = []
        for b in batches:
            outs.append(step(b.clone()))
            sched.step()
        return loss, optim, outs

    eager = run(False)
    frames = torch._dynamo.utils.counters["frames"]["ok"]
    compiled = run(True)
    _assert_same_training(eager, compiled)
    assert torch._dynamo.utils.counters["frames"]["ok"] - frames == 1


def test_same_structure_reuses_code_other_structure_compiles() -> None:
    """A new loss and optimizer of the same shapes reuse the compiled graph (module guards are
    skipped by default); a loss of other shapes gets its own, and the right numbers."""
    import torch._dynamo

    options = dict(AOT)  # merged with the default guard filter
    for cells, expected in ((CELLS, 1), (CELLS, 0), (2 * CELLS, 1)):
        loss, updater, batches = _build("dqn", cells)
        optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
        frames = torch._dynamo.utils.counters["frames"]["ok"]
        step = make_update_step(loss, optim, updater, compile=True, compile_options=options)
        out = step(batches[0].clone())
        assert torch._dynamo.utils.counters["frames"]["ok"] - frames == expected, cells
        # the step computed this loss's own value, not the one of the graph compiled before
        loss_ref, _, batches_ref = _build("dqn", cells)
        torch.testing.assert_close(out["loss"], loss_ref(batches_ref[0])["loss"].detach(), **TOL)


def test_fallback_warns_once_and_runs_eagerly() -> None:
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no code generation here")

    loss, updater, batches = _build("dqn")
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    step = make_update_step(
        loss, optim, updater, compile=True, compile_options={"backend": broken_backend}
    )
    with pytest.warns(RuntimeWarning, match="make_update_step: torch.compile failed"):
        first = step(batches[0].clone())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = [first] + [step(b.clone()) for b in batches[1:]]
    _assert_same_training(_train("dqn", False), (loss, optim, outs))


def test_errors() -> None:
    loss, updater, batches = _build("dqn")
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    with pytest.raises(TypeError, match="loss_module must be an nn.Module"):
        make_update_step(lambda td: td, optim)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        make_update_step(loss, "adam")
    with pytest.raises(TypeError, match="target_updater must have a step"):
        make_update_step(loss, optim, object())
    with pytest.raises(ValueError, match="max_grad_norm must be > 0"):
        make_update_step(loss, optim, max_grad_norm=0.0)
    with pytest.raises(TypeError, match="compile_options must be a dict"):
        make_update_step(loss, optim, compile=True, compile_options="inductor")
    with pytest.raises(TypeError, match="loss_keys must be a list"):
        make_update_step(loss, optim, loss_keys="loss")
    with pytest.raises(ValueError, match="loss_keys is empty"):
        make_update_step(loss, optim, loss_keys=[])
    frozen = torch.optim.Adam([nn.Parameter(torch.zeros(1), requires_grad=False)])
    with pytest.raises(ValueError, match="no parameter that requires a gradient"):
        make_update_step(loss, frozen)
    step = make_update_step(loss, optim, loss_keys=["loss_missing"])
    with pytest.raises(KeyError, match=r"loss_keys \['loss_missing'\] not in the loss output"):
        step(batches[0])
