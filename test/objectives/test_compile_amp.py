"""Compiled losses and value estimators, and mixed precision (``LossModule.set_autocast``).

Tolerances, and why:

- Compiled vs eager with ``backend="aot_eager"`` (the default suite: it traces with dynamo and
  AOTAutograd, which is where our plumbing can break, but runs eager kernels, so random draws
  match): losses and gradients within ``atol=rtol=1e-5``. Traced, the value recursions use the
  blocked scan instead of the C++ kernel (a different summation order: ~1e-7 apart).
- Inductor (slow tests): ``torch._inductor.config.fallback_random = True`` makes its random
  draws those of eager; fused kernels reorder float sums: ``atol=rtol=1e-4``.
- bfloat16 autocast vs float32: bfloat16 keeps 8 bits of mantissa (relative rounding ~4e-3
  per op); losses within ``5e-2`` relative, every gradient within ``5e-2`` of the float32 one
  in relative L2 norm (measured: ~1e-2 at most on these networks).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

from torchrl.data import Bounded
from torchrl.modules import (
    MLP,
    Actor,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from torchrl.objectives import (
    A2CLoss,
    ClipPPOLoss,
    DDPGLoss,
    DQNLoss,
    KLPENPPOLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
    ValueEstimators,
)
from torchrl.objectives.value import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator, VTrace

OBS, ACT = 3, 2
SPEC = Bounded(-1.0, 1.0, shape=(ACT,))
COMPILE_TOL = {"atol": 1e-5, "rtol": 1e-5}
INDUCTOR_TOL = {"atol": 1e-4, "rtol": 1e-4}
BF16_REL = 5e-2


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- data and networks ----------------------------------------------------------------------


def _batch(*batch: int, discrete: bool = False) -> TensorDict:
    if discrete:
        action = nn.functional.one_hot(torch.randint(ACT, batch), ACT)
    else:
        action = torch.rand(*batch, ACT) * 1.6 - 0.8
    return TensorDict(
        {
            "observation": torch.randn(*batch, OBS),
            "action": action,
            "action_log_prob": -torch.rand(*batch),
            "next": {
                "observation": torch.randn(*batch, OBS),
                "reward": torch.randn(*batch, 1),
                "done": torch.rand(*batch, 1) < 0.1,
                "terminated": torch.rand(*batch, 1) < 0.05,
            },
        },
        batch_size=batch,
    )


def _gaussian_actor() -> ProbabilisticActor:
    net = nn.Sequential(
        MLP(in_features=OBS, out_features=2 * ACT, num_cells=[16]), NormalParamExtractor()
    )
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
        spec=SPEC,
    )


def _qvalue() -> ValueOperator:
    return ValueOperator(
        MLP(in_features=OBS + ACT, out_features=1, num_cells=[16]),
        in_keys=["observation", "action"],
    )


def _value() -> ValueOperator:
    return ValueOperator(MLP(in_features=OBS, out_features=1, num_cells=[16]))


def _det_actor() -> Actor:
    return Actor(nn.Sequential(MLP(in_features=OBS, out_features=ACT, num_cells=[16]), nn.Tanh()))


def _make(name: str):
    """A small loss and a function making its input (``n`` transitions or ``n`` x 5 rollouts)."""
    torch.manual_seed(0)
    if name == "dqn":
        net = MLP(in_features=OBS, out_features=ACT, num_cells=[16])
        loss = DQNLoss(QValueActor(net, action_space="one_hot"))
        return loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9), (
            lambda n=8: _batch(n, discrete=True)
        )
    transitions = lambda n=8: _batch(n)  # noqa: E731
    if name == "sac":
        loss = SACLoss(_gaussian_actor(), _qvalue(), action_spec=SPEC)
        return loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9), transitions
    if name == "sac3":  # three critics: called under torch.vmap (two are looped on CPU)
        loss = SACLoss(_gaussian_actor(), _qvalue(), num_qvalue_nets=3, action_spec=SPEC)
        return loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9), transitions
    if name == "td3":
        loss = TD3Loss(_det_actor(), _qvalue(), action_spec=SPEC)
        return loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9), transitions
    if name == "ddpg":
        loss = DDPGLoss(_det_actor(), _qvalue())
        return loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9), transitions
    if name == "ppo":
        return ClipPPOLoss(_gaussian_actor(), _value()), (lambda n=4: _batch(n, 5))
    if name == "klppo":  # adapts beta in place: a select, not a branch on a tensor

        def with_old_dist(n=4):
            td = _batch(n, 5)
            td["loc"], td["scale"] = torch.randn(n, 5, ACT), torch.rand(n, 5, ACT) + 0.5
            return td

        return KLPENPPOLoss(_gaussian_actor(), _value()), with_old_dist
    if name == "a2c":
        return A2CLoss(_gaussian_actor(), _value()), (lambda n=4: _batch(n, 5))
    raise ValueError(name)


def _run(loss, td: TensorDict, seed: int = 2):
    """One call and backward: (input after the call, loss terms, gradients)."""
    torch.manual_seed(seed)
    td = td.clone()
    out = loss(td)
    terms = {k: v for k, v in out.items() if k.startswith("loss")}
    loss.zero_grad()
    sum(terms.values()).backward()
    grads = [p.grad.clone() for p in loss.parameters() if p.grad is not None]
    return td, {k: v.detach() for k, v in terms.items()}, grads


def _assert_same(ref, got, tol):
    assert ref[1].keys() == got[1].keys()
    for key in ref[1]:
        torch.testing.assert_close(got[1][key], ref[1][key], **tol, msg=f"loss term {key}")
    assert len(ref[2]) == len(got[2]) > 0
    for a, b in zip(ref[2], got[2]):
        torch.testing.assert_close(b, a, **tol)


# ---- compiled losses --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dqn", "sac", "ppo"])
def test_compiled_loss_matches_eager(name):
    loss, make_batch = _make(name)
    torch.manual_seed(1)
    td = make_batch()
    ref = _run(loss, td)
    counter = CompileCounterWithBackend("aot_eager")
    loss.compile(backend=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no eager fallback
        got = _run(loss, td)
    _assert_same(ref, got, COMPILE_TOL)
    assert counter.frame_count == 1  # one graph: no graph break
    # A second call reuses the graph and still matches.
    _assert_same(ref, _run(loss, td), COMPILE_TOL)
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    "name", ["a2c", "td3", "sac3", "klppo", pytest.param("ddpg", marks=pytest.mark.slow)]
)
def test_losses_trace_in_one_graph(name):
    loss, make_batch = _make(name)
    explanation = torch._dynamo.explain(loss)(make_batch())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def _update_step(name: str, compiled: bool):
    loss, make_batch = _make(name)
    optim = torch.optim.SGD(loss.parameters(), lr=1e-2)
    updater = SoftUpdate(loss, tau=0.1)

    def update(td):
        out = loss(td)
        total = sum(v for k, v in out.items() if k.startswith("loss"))
        optim.zero_grad()
        total.backward()
        optim.step()
        updater.step()
        return total.detach()

    step = torch.compile(update, backend="aot_eager") if compiled else update
    return loss, make_batch, step


@pytest.mark.parametrize(
    "name, sizes",
    [("dqn", (8, 8)), pytest.param("sac", (8, 8, 12, 16), marks=pytest.mark.slow)],
)
def test_compiled_update_step_matches_eager(name, sizes):
    """``torch.compile`` of a whole update: loss, backward, SGD step, SoftUpdate."""
    results = []
    for compiled in (False, True):
        loss, make_batch, step = _update_step(name, compiled)
        torch.manual_seed(1)
        batches = [make_batch(n) for n in sizes]
        torch.manual_seed(3)
        totals = torch.stack([step(td) for td in batches])
        params = [t.detach().clone() for t in loss.state_dict().values()]
        results.append((totals, params))
    torch.testing.assert_close(results[1][0], results[0][0], **COMPILE_TOL)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(b, a, **COMPILE_TOL)


def test_copies_of_a_compiled_loss_run_their_own_networks():
    loss, make_batch = _make("dqn")
    td = make_batch()
    loss.compile(backend="aot_eager")
    before = loss(td.clone())["loss"].detach()
    clone = copy.deepcopy(loss)
    with torch.no_grad():
        for param in clone.parameters():
            param.add_(1.0)
    assert not torch.equal(clone(td.clone())["loss"].detach(), before)
    torch.testing.assert_close(loss(td.clone())["loss"].detach(), before, atol=0.0, rtol=0.0)
    restored = pickle.loads(pickle.dumps(loss))
    torch.testing.assert_close(restored(td.clone())["loss"].detach(), before, atol=0.0, rtol=0.0)


class _Breaking(nn.Module):
    """A linear layer whose forward forces a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(OBS, ACT)

    def forward(self, x):
        torch._dynamo.graph_break()
        return self.linear(x)


def test_compile_failure_falls_back_to_eager_with_a_warning():
    torch.manual_seed(0)
    loss = DQNLoss(QValueActor(_Breaking(), action_space="one_hot"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    td = _batch(8, discrete=True)
    ref = _run(loss, td)
    loss.compile(backend="eager", fullgraph=True)
    with pytest.warns(RuntimeWarning, match=r"DQNLoss\.compile: torch\.compile failed"):
        got = _run(loss, td)
    _assert_same(ref, got, {"atol": 0.0, "rtol": 0.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        _run(loss, td)


def test_compile_rejects_positional_arguments():
    loss, _ = _make("dqn")
    with pytest.raises(TypeError, match="keyword arguments only"):
        loss.compile("inductor")
    with pytest.raises(TypeError, match="keyword arguments only"):
        loss.value_estimator.compile("inductor")


# ---- compiled value estimators ----------------------------------------------------------


def _vtrace() -> VTrace:
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(OBS, ACT), ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
    )
    return VTrace(gamma=0.9, actor_network=actor, value_network=_value())


ESTIMATORS = {
    "gae": lambda: GAE(gamma=0.9, lmbda=0.95, value_network=_value()),
    "td_lambda": lambda: TDLambdaEstimator(gamma=0.9, lmbda=0.9, value_network=_value()),
    "td1": lambda: TD1Estimator(gamma=0.9, value_network=_value()),
    "td0": lambda: TD0Estimator(gamma=0.9, value_network=_value()),
    "vtrace": _vtrace,
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name == "td1" else name
        for name in sorted(ESTIMATORS)
    ],
)
def test_compiled_estimator_matches_eager_on_new_batch_sizes(name):
    """Three sizes: one recompilation (the sizes become dynamic), not one per new size."""
    torch.manual_seed(0)
    estimator = ESTIMATORS[name]()
    counter = CompileCounterWithBackend("eager")
    estimator.compile(backend=counter)
    for batch in [(4, 6), (5, 7), (6, 5)]:
        td = _batch(*batch, discrete=name == "vtrace")
        ref = ESTIMATORS[name]()
        ref.load_state_dict(estimator.state_dict())
        expected = ref(td.clone())
        got = estimator(td.clone())
        for key in ("advantage", "value_target"):
            torch.testing.assert_close(got[key], expected[key], **COMPILE_TOL)
    assert counter.frame_count == 2, counter.frame_count


# ---- mixed precision --------------------------------------------------------------------


def _linear_output_dtypes(loss) -> tuple[set[torch.dtype], list]:
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda m, a, out: seen.add(out.dtype))
        for m in loss.modules()
        if isinstance(m, nn.Linear)
    ]
    return seen, hooks


def _assert_close_bf16(ref, got):
    for key in ref[1]:
        assert got[1][key].dtype == torch.float32, key
        torch.testing.assert_close(got[1][key], ref[1][key], atol=BF16_REL, rtol=BF16_REL)
    assert len(ref[2]) == len(got[2]) > 0
    for a, b in zip(ref[2], got[2]):
        assert b.dtype == torch.float32
        assert float((a - b).norm() / a.norm().clamp_min(1e-8)) < BF16_REL


@pytest.mark.parametrize("name", ["dqn", "sac", "ppo"])
def test_bf16_autocast_keeps_float32_where_required(name):
    loss, make_batch = _make(name)
    torch.manual_seed(1)
    td = make_batch()
    ref = _run(loss, td)
    seen, hooks = _linear_output_dtypes(loss)
    assert loss.set_autocast(torch.bfloat16) is loss
    assert loss.autocast_dtype is torch.bfloat16
    data, terms, grads = got = _run(loss, td)
    assert seen == {torch.bfloat16}  # the matmuls ran in bfloat16
    _assert_close_bf16(ref, got)
    for key, value in data.items(include_nested=True, leaves_only=True):
        if value.is_floating_point():
            assert value.dtype == torch.float32, key
    if name in ("dqn", "sac"):
        assert data["td_error"].dtype == torch.float32  # the priorities
    if name == "ppo":
        assert data["advantage"].dtype == data["value_target"].dtype == torch.float32
    if name in ("sac", "ppo"):
        dist = loss.actor_network.get_dist(td.clone())
        assert dist.loc.dtype == dist.scale.dtype == torch.float32
        assert dist.log_prob(td["action"]).dtype == torch.float32
    # Off again: float32 matmuls.
    seen.clear()
    loss.set_autocast(None)
    assert loss.autocast_dtype is None
    _assert_same(ref, _run(loss, td), COMPILE_TOL)
    assert seen == {torch.float32}
    for hook in hooks:
        hook.remove()


def test_bf16_autocast_reaches_ensemble_members():
    """torch.vmap ignores autocast for linear layers with a bias: members are looped then."""
    loss, make_batch = _make("sac3")
    td = make_batch()
    ref = _run(loss, td)
    seen, _ = _linear_output_dtypes(loss.qvalue_network)
    loss.set_autocast(torch.bfloat16)
    got = _run(loss, td)
    assert seen == {torch.bfloat16}
    _assert_close_bf16(ref, got)


def test_autocast_keeps_state_dict_and_survives_deepcopy():
    loss, make_batch = _make("sac")
    keys = list(loss.state_dict())
    loss.set_autocast(torch.bfloat16, device_type="cpu")
    assert list(loss.state_dict()) == keys
    clone = copy.deepcopy(loss)
    seen, _ = _linear_output_dtypes(clone)
    _run(clone, make_batch())
    assert seen == {torch.bfloat16}
    # The copy's wrappers run the copy's networks, not the original's.
    seen_original, _ = _linear_output_dtypes(loss)
    _run(clone, make_batch())
    assert not seen_original


def test_set_autocast_rejects_bad_arguments():
    loss, _ = _make("dqn")
    with pytest.raises(ValueError, match="bfloat16, torch.float16 or None, got torch.float64"):
        loss.set_autocast(torch.float64)
    with pytest.raises(TypeError, match="device_type must be a str"):
        loss.set_autocast(torch.bfloat16, device_type=torch.device("cpu"))


def test_float16_autocast_with_grad_scaler():
    loss, make_batch = _make("dqn")
    loss.set_autocast(torch.float16)
    optim = torch.optim.SGD(loss.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    before = [p.detach().clone() for p in loss.parameters()]
    out = loss(make_batch())
    assert out["loss"].dtype == torch.float32
    scaler.scale(out["loss"]).backward()
    scaler.step(optim)
    scaler.update()
    assert any(not torch.equal(a, b) for a, b in zip(before, loss.parameters()))


def test_compiled_loss_with_autocast_matches_eager_autocast():
    loss, make_batch = _make("sac")
    loss.set_autocast(torch.bfloat16)
    td = make_batch()
    ref = _run(loss, td)
    loss.compile(backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = _run(loss, td)
    # Same bfloat16 kernels in both: float32-level agreement.
    _assert_same(ref, got, COMPILE_TOL)


def test_set_autocast_after_compile_takes_effect():
    """Switching autocast on and off after compiling recompiles (dynamo guards on it)."""
    loss, make_batch = _make("dqn")
    td = make_batch()
    loss.compile(backend="aot_eager")
    seen, _ = _linear_output_dtypes(loss)
    plain = loss(td.clone())["loss"].detach()
    assert seen == {torch.float32}
    seen.clear()
    loss.set_autocast(torch.bfloat16)
    mixed = loss(td.clone())["loss"].detach()
    assert seen == {torch.bfloat16}
    assert mixed.dtype == torch.float32 and not torch.equal(mixed, plain)
    loss.set_autocast(None)
    torch.testing.assert_close(loss(td.clone())["loss"].detach(), plain, atol=0.0, rtol=0.0)


# ---- inductor (slow: tens of seconds to compile each on 2 cores) ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sac", "ppo"])
def test_inductor_loss_matches_eager(name):
    import torch._inductor.config as inductor_config

    loss, make_batch = _make(name)
    torch.manual_seed(1)
    td = make_batch()
    ref = _run(loss, td)
    loss.compile()
    with inductor_config.patch(fallback_random=True):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no eager fallback
            got = _run(loss, td)
    _assert_same(ref, got, INDUCTOR_TOL)


@pytest.mark.slow
def test_inductor_gae_two_batch_sizes():
    torch.manual_seed(0)
    gae = ESTIMATORS["gae"]()
    gae.compile()
    for batch in [(4, 6), (5, 6)]:
        td = _batch(*batch)
        expected = GAE(gamma=0.9, lmbda=0.95, value_network=gae.value_network)(td.clone())
        got = gae(td.clone())
        torch.testing.assert_close(got["advantage"], expected["advantage"], **INDUCTOR_TOL)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@needs_cuda
@pytest.mark.parametrize("name", ["sac", "ppo"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_autocast(name, dtype):
    loss, make_batch = _make(name)
    loss = loss.to("cuda")
    td = make_batch().to("cuda")
    ref = _run(loss, td)
    seen, _ = _linear_output_dtypes(loss)
    loss.set_autocast(dtype)
    data, _, _ = got = _run(loss, td)
    assert seen == {dtype}
    _assert_close_bf16(ref, got)
    if name == "sac":
        assert data["td_error"].dtype == torch.float32
    else:
        assert data["advantage"].dtype == data["value_target"].dtype == torch.float32


@needs_cuda
def test_cuda_compiled_ppo_matches_eager():
    loss, make_batch = _make("ppo")
    loss = loss.to("cuda")
    td = make_batch().to("cuda")
    ref = _run(loss, td)
    loss.compile(backend="aot_eager")
    _assert_same(ref, _run(loss, td), COMPILE_TOL)


@needs_cuda
@pytest.mark.parametrize("name", ["dqn", "sac", "ppo"])
def test_cuda_inductor_update_matches_eager(name):
    """A whole update (loss, backward, SGD step, SoftUpdate where there are target networks)
    compiled by inductor (Triton kernels) on the GPU: the same totals and parameters as eager
    after three steps."""
    import torch._inductor.config as inductor_config

    results = []
    for compiled in (False, True):
        torch._dynamo.reset()
        loss, make_batch = _make(name)
        loss = loss.to("cuda")
        optim = torch.optim.SGD(loss.parameters(), lr=1e-2)
        updater = None if name == "ppo" else SoftUpdate(loss, tau=0.1)  # PPO: no target nets

        def update(td, loss=loss, optim=optim, updater=updater):
            out = loss(td)
            total = sum(v for k, v in out.items() if k.startswith("loss"))
            optim.zero_grad()
            total.backward()
            optim.step()
            if updater is not None:
                updater.step()
            return total.detach()

        step = torch.compile(update) if compiled else update
        torch.manual_seed(1)
        batches = [make_batch().to("cuda") for _ in range(3)]
        torch.manual_seed(3)
        with inductor_config.patch(fallback_random=True):
            totals = torch.stack([step(td) for td in batches])
        params = [t.detach().clone() for t in loss.state_dict().values()]
        results.append((totals, params))
    torch.testing.assert_close(results[1][0], results[0][0], **INDUCTOR_TOL)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(b, a, **INDUCTOR_TOL)
