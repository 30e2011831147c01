"""GTrXL network and module: step mode vs windows, memory resets, primer vs views, errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data.trajectory_views import build_views, get_views
from torchrl.modules import set_recurrent_mode
from torchrl.modules.gtrxl import GTrXL, GTrXLModule

# Float32 step-by-step and window computations reduce in different orders.
ATOL = 1e-5

B, T, F, D, L, N_MEM = 3, 13, 5, 8, 2, 4


def _module(memory_mode: str = "views", seed: int = 0) -> GTrXLModule:
    torch.manual_seed(seed)
    m = GTrXLModule(
        F,
        D,
        L,
        num_heads=2,
        memory_length=N_MEM,
        gate_bias=0.0,  # gates half open: memory differences show in the outputs
        in_key="obs",
        out_key="h",
        memory_mode=memory_mode,  # type: ignore[arg-type]
    )
    return m.eval()


def _trajectory(seed: int = 1) -> TensorDict:
    """``[B, T]`` with episode starts at 0 and inside the trajectory (``is_init`` and done agree)."""
    g = torch.Generator().manual_seed(seed)
    is_init = torch.zeros(B, T, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[0, 6] = True
    is_init[1, 2] = True
    is_init[1, 3] = True  # a one-step episode
    is_init[2, 11] = True
    done = torch.zeros(B, T, dtype=torch.bool)
    done[:, :-1] = is_init[:, 1:]
    td = TensorDict(obs=torch.randn(B, T, F, generator=g), batch_size=[B, T])
    td["is_init"] = is_init.unsqueeze(-1)
    td["next", "done"] = done.unsqueeze(-1)
    return td


def _run_views_steps(m: GTrXLModule, traj: TensorDict) -> TensorDict:
    """Collects ``traj`` step by step in views mode, building each step's memory with build_views."""
    views = get_views(m)
    td = traj.clone()
    td["gtrxl_embeddings"] = torch.zeros(B, T, L, D)
    td["gtrxl_valid"] = torch.zeros(B, T, 1, dtype=torch.bool)
    outs = []
    for t in range(T):
        # a collector's ring buffer: the view of the steps seen so far, at the current step
        seen = build_views(td[:, : t + 1].clone(), views)
        step = seen[:, t].clone()
        step = m(step)
        outs.append(step["h"])
        td["gtrxl_embeddings"][:, t] = step["gtrxl_embeddings"]
        td["gtrxl_valid"][:, t] = step["gtrxl_valid"]
    td["h"] = torch.stack(outs, 1)
    return td


def _run_primer_steps(m: GTrXLModule, traj: TensorDict) -> torch.Tensor:
    """Collects ``traj`` step by step in primer mode, carrying ``("next", memory)`` over."""
    memory = torch.randn(B, N_MEM, L, D)  # garbage: is_init at step 0 must clear it
    mask = torch.ones(B, N_MEM, dtype=torch.bool)
    outs = []
    for t in range(T):
        step = traj[:, t].clone()
        step["gtrxl_memory"], step["gtrxl_memory_mask"] = memory, mask
        step = m(step)
        outs.append(step["h"])
        memory, mask = step["next", "gtrxl_memory"], step["next", "gtrxl_memory_mask"]
    return torch.stack(outs, 1)


def test_views_declared():
    m = _module()
    views = get_views(m)
    assert [(v.key, v.shifts, v.target_key) for v in views] == [
        ("gtrxl_embeddings", (-4, -3, -2, -1), "gtrxl_memory"),
        ("gtrxl_valid", (-4, -3, -2, -1), "gtrxl_memory_mask"),
    ]
    assert all(v.padding == "zeros" and v.used_for_training for v in views)
    assert _module("primer").views == []


def test_step_equals_window_across_episode_starts():
    m = _module()
    td = _run_views_steps(m, _trajectory())
    steps = td["h"]
    # the buffer side: rebuild the memory views of the stored rollout, cut windows anywhere
    stored = td.exclude("h")
    build_views(stored, get_views(m))
    for start, stop in [(0, T), (1, 7), (4, 13), (5, 9), (10, 12)]:
        window = stored[:, start:stop].clone()
        with set_recurrent_mode(True):
            out = m(window)["h"]
        torch.testing.assert_close(out, steps[:, start:stop], atol=ATOL, rtol=0)
    # the memory matters: without it the windows that do not start an episode differ
    window = stored[:, 5:9].clone()
    window["gtrxl_memory_mask"] = torch.zeros_like(window["gtrxl_memory_mask"])
    with set_recurrent_mode(True):
        blind = m(window)["h"]
    assert (blind - steps[:, 5:9]).abs().max() > 1e-3


def test_window_without_is_init_uses_done():
    m = _module()
    td = _run_views_steps(m, _trajectory())
    stored = td.exclude("h")
    build_views(stored, get_views(m))
    window = stored[:, 3:13].exclude("is_init")
    with set_recurrent_mode(True):
        out = m(window)["h"]
    torch.testing.assert_close(out, td["h"][:, 3:13], atol=ATOL, rtol=0)


def test_primer_mode_equals_views_mode():
    traj = _trajectory()
    views_out = _run_views_steps(_module("views"), traj)["h"]
    primer = _module("primer")
    torch.testing.assert_close(_run_primer_steps(primer, traj), views_out, atol=ATOL, rtol=0)
    # primer windows: the stored root memory of the first step, zeroed at is_init
    td = traj.clone()
    memory = torch.zeros(B, N_MEM, L, D)
    mask = torch.zeros(B, N_MEM, dtype=torch.bool)
    mems, masks = [], []
    for t in range(T):
        step = td[:, t].clone()
        step["gtrxl_memory"], step["gtrxl_memory_mask"] = memory, mask
        mems.append(memory)
        masks.append(mask)
        step = primer(step)
        memory, mask = step["next", "gtrxl_memory"], step["next", "gtrxl_memory_mask"]
    td["gtrxl_memory"], td["gtrxl_memory_mask"] = torch.stack(mems, 1), torch.stack(masks, 1)
    with set_recurrent_mode(True):
        out = primer(td[:, 4:11].clone())["h"]
    torch.testing.assert_close(out, views_out[:, 4:11], atol=ATOL, rtol=0)


def test_memory_reset_at_is_init():
    m = _module("primer")
    step = TensorDict(obs=torch.randn(B, F), batch_size=[B])
    step["is_init"] = torch.tensor([[True], [False], [True]])
    step["gtrxl_memory"] = torch.randn(B, N_MEM, L, D)
    step["gtrxl_memory_mask"] = torch.ones(B, N_MEM, dtype=torch.bool)
    out = m(step.clone())
    empty = step.clone()
    empty["gtrxl_memory_mask"] = torch.zeros(B, N_MEM, dtype=torch.bool)
    fresh = m(empty)
    rows = step["is_init"].squeeze(-1)
    torch.testing.assert_close(out["h"][rows], fresh["h"][rows], atol=ATOL, rtol=0)
    assert (out["h"][~rows] - fresh["h"][~rows]).abs().max() > 1e-3
    # the next memory keeps only the new step for reset rows
    next_mask = out["next", "gtrxl_memory_mask"]
    assert next_mask[rows].tolist() == [[False, False, False, True]] * 2
    assert next_mask[~rows].all()
    assert (out["next", "gtrxl_memory"][rows][:, :-1] == 0).all()
    torch.testing.assert_close(
        out["next", "gtrxl_memory"][:, :-1],
        step["gtrxl_memory"][:, 1:].masked_fill(rows[:, None, None, None], 0),
    )
    # views mode: a view is zero-padded at an episode start, and is_init clears it anyway
    v = _module("views")
    v.load_state_dict(m.state_dict())
    torch.testing.assert_close(v(step.clone())["h"], out["h"], atol=ATOL, rtol=0)


def test_padded_slots_not_attended():
    net = GTrXL(F, D, L, num_heads=2, memory_length=N_MEM, gate_bias=0.0).eval()
    x = torch.randn(2, 1, F)
    memory = torch.randn(2, N_MEM, L, D)
    mask = torch.tensor([[False, False, True, True]] * 2)
    other = memory.clone()
    other[:, :2] = torch.randn(2, 2, L, D)  # only the padded slots change
    a, _ = net(x, memory, mask)
    b, _ = net(x, other, mask)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    c, _ = net(x, other, torch.ones_like(mask))
    assert (a - c).abs().max() > 1e-3


def test_gradients_flow():
    m = _module()
    m.train()
    with torch.no_grad():
        td = _run_views_steps(m, _trajectory()).exclude("h")
    build_views(td, get_views(m))
    memory = td["gtrxl_memory"][:, 2:10].clone().requires_grad_(True)
    window = td[:, 2:10].clone()
    window.set("gtrxl_memory", memory)
    with set_recurrent_mode(True):
        out = m(window)["h"]
    out.pow(2).sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert memory.grad is None  # stop-gradient into the memory


def test_gate_bias_starts_near_identity():
    torch.manual_seed(0)
    x = torch.randn(4, 3, F)
    near = GTrXL(F, D, 1, memory_length=2, gate_bias=10.0)
    _, emb = near(x)
    out = near.norm(emb[:, :, 0])  # output if every layer is the identity
    torch.testing.assert_close(near(x)[0], out, atol=1e-3, rtol=0)


def test_errors():
    m = _module()
    step = TensorDict(obs=torch.randn(B, F), batch_size=[B])
    with pytest.raises(KeyError, match="no memory 'gtrxl_memory'.*build_views"):
        m(step.clone())
    step["gtrxl_memory"] = torch.zeros(B, N_MEM + 1, L, D)
    step["gtrxl_memory_mask"] = torch.zeros(B, N_MEM, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"'gtrxl_memory' must have shape .*\[3, 4, 2, 8\]"):
        m(step.clone())
    step["gtrxl_memory"] = torch.zeros(B, N_MEM, L, D)
    step["gtrxl_memory_mask"] = torch.zeros(B, N_MEM + 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="'gtrxl_memory_mask' must have shape"):
        m(step.clone())
    step["gtrxl_memory_mask"] = torch.zeros(B, N_MEM, dtype=torch.bool)
    bad = step.clone()
    bad["obs"] = torch.zeros(B, F + 1)
    with pytest.raises(ValueError, match=r"'obs' must have shape \[\*batch, input_size\]"):
        m(bad)
    with pytest.raises(KeyError, match="no input 'obs'"):
        m(step.exclude("obs"))
    primer = _module("primer")
    with pytest.raises(KeyError, match="'is_init'.*InitTracker"):
        primer(step.clone())
    with pytest.raises(KeyError, match="make_tensordict_primer"):
        primer(
            TensorDict(obs=torch.randn(B, F), is_init=torch.ones(B, 1, dtype=bool), batch_size=[B])
        )
    # views mode: the primer only declares the per-step entries (for a collector's rings)
    spec = m.make_tensordict_primer().primers
    assert spec["gtrxl_embeddings"].shape == (L, D) and spec["gtrxl_valid"].dtype == torch.bool
    window = TensorDict(
        obs=torch.randn(B, 3, F),
        gtrxl_memory=torch.zeros(B, 3, N_MEM, L, D),
        gtrxl_memory_mask=torch.zeros(B, 3, N_MEM, dtype=torch.bool),
        batch_size=[B, 3],
    )
    with set_recurrent_mode(True):
        with pytest.raises(KeyError, match="neither 'is_init' nor \\('next', 'done'\\)"):
            m(window)
        with pytest.raises(ValueError, match="needs a tensordict with a time dim"):
            m(step.clone().reshape(-1)[0])
    with pytest.raises(ValueError, match="memory_mode must be 'views' or 'primer'"):
        GTrXLModule(F, D, memory_length=2, in_key="a", out_key="b", memory_mode="ring")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs input_size, hidden_size and memory_length"):
        GTrXLModule(F, D, in_key="a", out_key="b")
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        GTrXL(F, D, num_heads=3, memory_length=2)
    with pytest.raises(ValueError, match="memory_length must be a positive int"):
        GTrXL(F, D, memory_length=0)


def test_primer_expands_when_memory_length_equals_num_envs():
    from torchrl.envs import PendulumEnv
    from torchrl.envs.transforms import InitTracker, TransformedEnv

    m = GTrXLModule(3, D, memory_length=4, in_key="observation", out_key="h", memory_mode="primer")
    env = TransformedEnv(PendulumEnv(batch_size=[4], seed=0), InitTracker())
    env = env.append_transform(m.make_tensordict_primer())
    td = env.reset()
    assert td["gtrxl_memory"].shape == (4, 4, 1, D)
    assert td["gtrxl_memory_mask"].shape == (4, 4)
    assert m(td)["h"].shape == (4, D)


def test_primer_env_rollout():
    from torchrl.envs import PendulumEnv, check_env_specs
    from torchrl.envs.transforms import InitTracker, TransformedEnv

    torch.manual_seed(0)
    m = GTrXLModule(3, D, memory_length=3, in_key="observation", out_key="h", memory_mode="primer")
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), InitTracker())
    env = env.append_transform(m.make_tensordict_primer())
    check_env_specs(env)

    class Policy(torch.nn.Module):
        def forward(self, td):
            m(td)
            td["action"] = td["h"][..., :1].tanh()
            return td

    with torch.no_grad():
        rollout = env.rollout(6, Policy(), break_when_any_done=False)
    assert rollout["gtrxl_memory_mask"][:, 0].sum() == 0
    assert rollout["gtrxl_memory_mask"][:, 4].all()
    # stored root memory of step t+1 is the next memory of step t
    torch.testing.assert_close(
        rollout["gtrxl_memory"][:, 1:], rollout["next", "gtrxl_memory"][:, :-1]
    )
    with set_recurrent_mode(True):
        out = m(rollout.clone())["h"]
    torch.testing.assert_close(out, rollout["h"], atol=ATOL, rtol=0)


def _cartpole_policy(memory_mode: str):
    from tensordict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(0)
    trunk = GTrXLModule(
        2,
        D,
        L,
        num_heads=2,
        memory_length=3,
        gate_bias=0.0,
        in_key="observation",
        out_key="h",
        memory_mode=memory_mode,  # type: ignore[arg-type]
    )
    head = TensorDictModule(torch.nn.Linear(D, 2), ["h"], ["logits"])
    act = TensorDictModule(lambda x: x.argmax(-1), ["logits"], ["action"])
    return TensorDictSequential(trunk, head, act)


def test_views_collector_stores_embeddings_once():
    from torchrl.collectors import SyncDataCollector
    from torchrl.envs.custom.stateless_cartpole import StatelessCartPole
    from torchrl.envs.transforms import InitTracker, TransformedEnv

    def env(primer=None):
        base = StatelessCartPole(
            batch_size=[2], seed=0, max_episode_steps=7, categorical_action_encoding=True
        )
        out = TransformedEnv(base, InitTracker())
        return out if primer is None else out.append_transform(primer)

    frames = 2 * 24
    policy = _cartpole_policy("views")
    collector = SyncDataCollector(env(), policy, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    keys = set(batch.keys(True, True))
    assert "gtrxl_memory" not in keys and "gtrxl_memory_mask" not in keys
    assert batch["gtrxl_embeddings"].shape == (2, 24, L, D)
    assert batch["is_init"][:, 1:].any()  # episodes end inside the batch
    # the same weights with the memory carried by the env give the same rollout
    primed = _cartpole_policy("primer")
    primed.load_state_dict(policy.state_dict())
    collector = SyncDataCollector(
        env(primed[0].make_tensordict_primer()),
        primed,
        frames_per_batch=frames,
        total_frames=frames,
    )
    reference = next(iter(collector))
    collector.shutdown()
    torch.testing.assert_close(batch["h"], reference["h"], atol=ATOL, rtol=0)
    assert torch.equal(batch["action"], reference["action"])
    # training: rebuild the memory from the stored embeddings, run windows
    build_views(batch, get_views(policy))
    with set_recurrent_mode(True):
        out = policy[0](batch[:, 5:20].clone())["h"]
    torch.testing.assert_close(out, reference["h"][:, 5:20], atol=ATOL, rtol=0)
