"""TransformerModule and the recurrent helpers: masks, positions, precision, canonical layout."""

import copy
import pickle

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential

from torchrl.envs.transforms import InitTracker, TransformedEnv
from torchrl.modules import LSTMModule, set_recurrent_mode
from torchrl.modules.transformer_module import (
    CausalTransformer,
    TransformerModule,
    canonicalize_rnn_subset,
    get_recurrent_matmul_precision,
    positions_from_is_init,
    segment_causal_mask_from_is_init,
    set_recurrent_matmul_precision,
)

T_, F_ = True, False
# two rows: row 0 has episodes starting at 0 and 3; row 1 starts mid-episode, new one at 2
IS_INIT = torch.tensor([[T_, F_, F_, T_, F_, F_], [F_, F_, T_, F_, F_, F_]])


def _module(**kwargs):
    kwargs.setdefault("in_key", "obs")
    kwargs.setdefault("out_key", "h")
    return TransformerModule(3, 8, 2, num_heads=2, max_seq_len=16, **kwargs)


def _window(n=2, t=6, starts=((0, 3), (0, 2))):
    is_init = torch.zeros(n, t, 1, dtype=torch.bool)
    for row, cols in enumerate(starts):
        is_init[row, list(cols)] = True
    return TensorDict(obs=torch.randn(n, t, 3), is_init=is_init, batch_size=[n, t])


def _run_window(module, td):
    with set_recurrent_mode(True):
        return module(td.clone())["h"]


# --------------------------------------------------------------------------- positions, masks


def test_positions_hand_checked():
    expected = torch.tensor([[0, 1, 2, 0, 1, 2], [0, 1, 0, 1, 2, 3]])
    pos = positions_from_is_init(IS_INIT)
    assert pos.dtype == torch.long
    assert torch.equal(pos, expected)
    # leading batch dims are kept
    assert torch.equal(positions_from_is_init(IS_INIT.expand(3, 2, 6)), expected.expand(3, 2, 6))
    assert torch.equal(positions_from_is_init(torch.ones(4, dtype=torch.bool)), torch.zeros(4))


def test_mask_hand_checked():
    mask = segment_causal_mask_from_is_init(IS_INIT)
    assert mask.shape == (2, 6, 6) and mask.dtype == torch.bool
    row1 = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 1, 1, 1, 0],
            [0, 0, 1, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask[1], row1)
    block = torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(mask[0], torch.block_diag(block, block))
    # each step sees exactly the steps of its episode up to itself
    assert torch.equal(mask.sum(-1), positions_from_is_init(IS_INIT) + 1)


def test_helpers_reject_non_bool():
    with pytest.raises(ValueError, match="boolean"):
        positions_from_is_init(IS_INIT.long())
    with pytest.raises(ValueError, match="boolean"):
        segment_causal_mask_from_is_init(IS_INIT.float())


# --------------------------------------------------------------------------- TransformerModule


def test_window_output_ignores_future_and_previous_episode():
    module = _module()
    td = _window()
    out = _run_window(module, td)
    assert out.shape == (2, 6, 8)
    # perturb step 4 of row 0: steps 0..3 unchanged, step 5 (same episode) changes
    future = td.clone()
    future["obs"][0, 4] += 5.0
    out_f = _run_window(module, future)
    torch.testing.assert_close(out_f[0, :4], out[0, :4])
    assert not torch.allclose(out_f[0, 5], out[0, 5])
    torch.testing.assert_close(out_f[1], out[1])
    # perturb the first episode of row 0 (steps 0..2): the second episode is unchanged
    previous = td.clone()
    previous["obs"][0, :3] += 5.0
    out_p = _run_window(module, previous)
    torch.testing.assert_close(out_p[0, 3:], out[0, 3:])
    assert not torch.allclose(out_p[0, 2], out[0, 2])


def test_step_mode_matches_window_across_resets():
    module = _module()
    td = _window(starts=((0, 3), (0, 1, 4)))
    window = _run_window(module, td)
    steps = torch.stack([module(td[:, t].clone())["h"] for t in range(6)], 1)
    torch.testing.assert_close(steps, window, rtol=0, atol=1e-5)
    # continuing with no reset attends to the whole current episode
    nxt = TensorDict(
        obs=torch.randn(2, 3), is_init=torch.zeros(2, 1, dtype=torch.bool), batch_size=[2]
    )
    longer = torch.cat([td, nxt.unsqueeze(1)], 1)
    step6 = module(nxt.clone())["h"]
    torch.testing.assert_close(step6, _run_window(module, longer)[:, 6], rtol=0, atol=1e-5)


def test_window_backpropagates():
    module = _module()
    _run_window(module, _window()).sum().backward()
    grads = [p.grad for p in module.parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_window_must_start_an_episode_and_needs_is_init():
    module = _module()
    td = _window()
    td["is_init"][1, 0] = False
    with pytest.raises(ValueError, match="start an episode"):
        _run_window(module, td)
    with pytest.raises(KeyError, match="InitTracker"):
        module(TensorDict(obs=torch.randn(2, 3), batch_size=[2]))


def test_step_mode_refuses_to_start_mid_episode():
    module = _module()
    td = TensorDict(
        obs=torch.randn(2, 3), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    cont = td.clone().set("is_init", torch.zeros(2, 1, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="InitTracker"):
        module(cont.clone())
    module(td.clone())
    module(cont.clone())  # a cache exists now
    module.reset_cache()
    with pytest.raises(RuntimeError, match="reset_cache"):
        module(cont.clone())
    # a new batch shape drops the cache too
    module(td.clone())
    with pytest.raises(RuntimeError):
        module(cont[:1].clone())


def test_cache_dropped_when_parameters_change():
    module = _module()
    td = TensorDict(
        obs=torch.randn(2, 3), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    cont = td.clone().set("is_init", torch.zeros(2, 1, dtype=torch.bool))
    module(td.clone())
    module(cont.clone())
    with torch.no_grad():
        next(module.parameters()).add_(0.1)
    with pytest.raises(RuntimeError, match="changed parameters"):
        module(cont.clone())


def test_copies_start_with_empty_cache_and_share_parameters():
    module = _module()
    td = TensorDict(
        obs=torch.randn(2, 3), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    module(td.clone())
    assert module._kv_cache is not None
    assert copy.deepcopy(module)._kv_cache is None
    restored = pickle.loads(pickle.dumps(module))
    assert restored._kv_cache is None
    torch.testing.assert_close(restored(td.clone())["h"], module(td.clone())["h"])
    trained = module.set_recurrent_mode(True)
    assert trained.recurrent_mode and not module.recurrent_mode
    assert trained._kv_cache is None and trained.transformer is module.transformer


@pytest.mark.parametrize("batch_size", [[2], []])
def test_rollout_with_init_tracker_replays_in_window_mode(batch_size):
    max_steps = [3, 4] if batch_size else 3
    env = TransformedEnv(CountingEnv(batch_size=batch_size, max_steps=max_steps), InitTracker())
    policy = TensorDictSequential(
        TransformerModule(
            1, 8, num_heads=2, max_seq_len=8, in_key="observation", out_key="features"
        ),
        TensorDictModule(
            lambda f: (f.sum(-1, keepdim=True) > 0).long(),
            in_keys=["features"],
            out_keys=["action"],
        ),
    )
    rollout = env.rollout(10, policy, break_when_any_done=False)
    assert rollout.batch_size == (*batch_size, 10)
    is_init = rollout["is_init"].reshape(-1, 10)
    # the first sub-env ends every 3 steps: the rollout crosses episode starts
    assert torch.equal(is_init[0].nonzero().squeeze(-1), torch.tensor([0, 3, 6, 9]))
    with set_recurrent_mode(True):
        replay = policy(rollout.exclude("features", "action", "next"))
    torch.testing.assert_close(replay["features"], rollout["features"], rtol=0, atol=1e-5)


def test_constructor_checks_and_custom_backbone():
    with pytest.raises(ValueError, match="max_seq_len"):
        TransformerModule(3, 8, in_key="obs", out_key="h")
    with pytest.raises(ValueError, match="exactly one"):
        TransformerModule(3, 8, num_heads=2, max_seq_len=4, out_key="h")
    backbone = CausalTransformer(3, 8, num_heads=4, max_seq_len=4)
    module = TransformerModule(
        transformer=backbone, in_keys=["obs", "first"], out_keys=[("nested", "h")]
    )
    assert module.in_keys == ["obs", "first"] and module.is_init_key == "first"
    td = TensorDict(obs=torch.randn(5, 3), first=torch.ones(5, 1, dtype=torch.bool), batch_size=[5])
    assert module(td)["nested", "h"].shape == (5, 8)


def test_positions_past_max_seq_len_raise():
    module = TransformerModule(3, 8, num_heads=2, max_seq_len=2, in_key="obs", out_key="h")
    td = _window(n=1, t=3, starts=((0,),))
    with pytest.raises(ValueError, match="max_seq_len"):
        _run_window(module, td)


# --------------------------------------------------------------------------- precision


@pytest.fixture
def _restore_precision(monkeypatch):
    monkeypatch.delenv("TORCHRL_RNN_PRECISION", raising=False)
    torch_mode = torch.get_float32_matmul_precision()
    yield monkeypatch
    set_recurrent_matmul_precision(None)
    torch.set_float32_matmul_precision(torch_mode)


def test_matmul_precision_resolution(_restore_precision):
    monkeypatch = _restore_precision
    torch.set_float32_matmul_precision("highest")
    assert get_recurrent_matmul_precision() == "ieee"
    torch.set_float32_matmul_precision("high")
    assert get_recurrent_matmul_precision() == "tf32"
    monkeypatch.setenv("TORCHRL_RNN_PRECISION", "tf32x3")
    assert get_recurrent_matmul_precision() == "tf32x3"
    set_recurrent_matmul_precision("ieee")  # the global setting beats the env var
    assert get_recurrent_matmul_precision() == "ieee"
    set_recurrent_matmul_precision("auto")
    assert get_recurrent_matmul_precision() == "tf32x3"
    set_recurrent_matmul_precision("fast")
    expected = (
        "tf32"
        if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
        else "ieee"
    )
    assert get_recurrent_matmul_precision() == expected
    with pytest.raises(ValueError, match="unknown"):
        set_recurrent_matmul_precision("bf16")
    with pytest.raises(ValueError, match="unknown"):
        _module(recurrent_matmul_precision="double")


def test_module_runs_under_every_precision(_restore_precision):
    td = _window()
    module = _module()
    reference = _run_window(module, td)
    for mode in ("ieee", "tf32", "high-prec"):
        set_recurrent_matmul_precision(mode)
        torch.testing.assert_close(_run_window(module, td), reference)
    # the module leaves torch's own setting as it found it
    assert torch.get_float32_matmul_precision() == "highest"


# --------------------------------------------------------------------------- canonical layout


def test_canonicalize_rnn_subset():
    actor = LSTMModule(3, 4, in_key="obs", out_key="a")
    critic = _module(in_key="obs2", out_key="c")
    odd = torch.randn(5, 2, 3).transpose(0, 1)
    td = TensorDict(
        obs=odd,
        obs2=odd.clone().transpose(0, 1).contiguous().transpose(0, 1),
        is_init=torch.ones(5, 2, 1, dtype=torch.bool).transpose(0, 1),
        other=odd,
        batch_size=[2, 5],
    )
    assert not td["obs2"].is_contiguous() and not td["is_init"].is_contiguous()
    out = canonicalize_rnn_subset(td, [actor, critic])
    for key in ("obs", "obs2", "is_init"):
        assert out[key].is_contiguous() and not td[key].is_contiguous()
        torch.testing.assert_close(out[key], td[key])
    assert not out["other"].is_contiguous()
    same = canonicalize_rnn_subset(td, [actor], inplace=True)
    assert same is td and td["obs"].is_contiguous()
