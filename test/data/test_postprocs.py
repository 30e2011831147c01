"""MultiStep: n-step rewards and next entries within trajectories."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data.postprocs import MultiStep


def _batch(reward, done, mask=None):
    reward = torch.as_tensor(reward, dtype=torch.float32)
    shape = reward.shape
    data = TensorDict(
        observation=torch.arange(reward.numel(), dtype=torch.float32).reshape(*shape, 1),
        next=TensorDict(
            reward=reward.unsqueeze(-1),
            done=torch.as_tensor(done).unsqueeze(-1),
            terminated=torch.as_tensor(done).unsqueeze(-1),
            observation=torch.arange(1, reward.numel() + 1, dtype=torch.float32).reshape(*shape, 1),
            batch_size=shape,
        ),
        batch_size=shape,
    )
    if mask is not None:
        data["collector"] = TensorDict(mask=torch.as_tensor(mask), batch_size=shape)
    return data


def _reference(reward, done, gamma, n):
    # a plain loop over each step
    out, nxt = [], []
    T = len(reward)
    for t in range(T):
        total, k = 0.0, 0
        while True:
            total += gamma**k * reward[t + k]
            if done[t + k] or k == n or t + k == T - 1:
                break
            k += 1
        out.append(total)
        nxt.append(t + k)
    return out, nxt


@pytest.mark.parametrize("n", [0, 1, 3])
def test_matches_loop(n):
    torch.manual_seed(0)
    reward = torch.randn(12).tolist()
    done = [False, False, True, False, False, False, False, True, False, False, False, False]
    out = MultiStep(0.9, n)(_batch(reward, done))
    expected, target = _reference(reward, done, 0.9, n)
    assert torch.allclose(out["next", "reward"].squeeze(-1), torch.tensor(expected))
    assert out["next", "observation"].squeeze(-1).tolist() == [t + 1 for t in target]
    steps = torch.tensor(target) - torch.arange(12) + 1
    assert out["steps_to_next_obs"].tolist() == steps.tolist()
    assert torch.allclose(out["gamma"], 0.9 ** steps.float())
    assert torch.equal(out["next", "original_reward"].squeeze(-1), torch.tensor(reward))
    assert out["next", "done"].squeeze(-1).tolist() == [done[t] for t in target]


def test_batched_rows_are_independent():
    reward = torch.ones(2, 4)
    done = torch.tensor([[False, False, False, False], [True, False, False, False]])
    out = MultiStep(1.0, 2)(_batch(reward, done))
    assert out["next", "reward"].squeeze(-1).tolist() == [[3, 3, 2, 1], [1, 3, 2, 1]]


def test_mask_ends_padded_rows():
    reward = torch.ones(1, 5)
    done = torch.zeros(1, 5, dtype=torch.bool)
    mask = torch.tensor([[True, True, True, False, False]])
    out = MultiStep(1.0, 3)(_batch(reward, done, mask))
    assert out["next", "reward"].squeeze(-1)[0, :3].tolist() == [3, 2, 1]


def test_errors():
    with pytest.raises(ValueError, match="n_steps"):
        MultiStep(0.9, -1)
    with pytest.raises(ValueError, match="gamma"):
        MultiStep(1.5, 1)
    with pytest.raises(KeyError, match="reward"):
        MultiStep(0.9, 1)(TensorDict(next=TensorDict(done=torch.zeros(3, 1)), batch_size=[3]))
