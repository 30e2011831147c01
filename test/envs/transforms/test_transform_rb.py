"""Replay-buffer transforms: Reward2GoTransform (on writes) and BurnInTransform (on samples)."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import CountEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, SliceSampler
from torchrl.envs.transforms import BurnInTransform, Reward2GoTransform, TransformedEnv


def reference_reward2go(reward: torch.Tensor, done: torch.Tensor, gamma: float) -> torch.Tensor:
    out = torch.zeros_like(reward)
    running = torch.zeros_like(reward[..., 0, :])
    for t in range(reward.shape[-2] - 1, -1, -1):
        running = reward[..., t, :] + gamma * running * (~done[..., t, :]).float()
        out[..., t, :] = running
    return out


class TestReward2Go:
    @pytest.mark.parametrize("gamma", [1.0, 0.9])
    def test_batched_trajectories(self, gamma):
        data = CountEnv(batch_size=[3], max_steps=[2, 3, 4]).rollout(9, break_when_any_done=False)
        out = Reward2GoTransform(gamma=gamma).inv(data)
        expected = reference_reward2go(data["next", "reward"], data["next", "done"], gamma)
        torch.testing.assert_close(out["reward_to_go"], expected)
        assert "reward_to_go" not in data.keys()  # inv writes into a copy

    def test_in_replay_buffer(self):
        data = CountEnv(max_steps=3).rollout(6, break_when_any_done=False)
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10), transform=Reward2GoTransform(gamma=0.5), batch_size=6
        )
        rb.extend(data)
        stored = rb.storage[:6]
        expected = reference_reward2go(data["next", "reward"], data["next", "done"], 0.5)
        torch.testing.assert_close(stored["reward_to_go"], expected)
        assert "reward_to_go" in rb.sample().keys()

    def test_custom_keys(self):
        data = TensorDict(
            next=TensorDict(
                r=torch.ones(4, 1), end=torch.tensor([[False], [True], [False], [False]])
            ),
            batch_size=[4],
        )
        t = Reward2GoTransform(in_keys=[("next", "r")], out_keys=["g"], done_key=("next", "end"))
        assert t.inv(data)["g"].squeeze(-1).tolist() == [2.0, 1.0, 2.0, 1.0]
        assert t(data) is data  # forward does nothing

    def test_errors(self):
        with pytest.raises(RuntimeError, match="replay-buffer"):
            TransformedEnv(CountEnv(), Reward2GoTransform())
        with pytest.raises(KeyError, match="Reward2GoTransform.*done"):
            Reward2GoTransform().inv(
                TensorDict(next=TensorDict(reward=torch.ones(2, 1)), batch_size=[2])
            )


class CumSum(torch.nn.Module):
    """A toy recurrent cell over [*B, T]: next hidden = first hidden + cumulative inputs."""

    def forward(self, hidden, x):
        return hidden[..., :1, :] + x.cumsum(-2)


def recurrent_module():
    return TensorDictModule(CumSum(), in_keys=["hidden", "x"], out_keys=[("next", "hidden")])


class TestBurnIn:
    def test_burn_in(self):
        data = TensorDict(
            x=torch.arange(12.0).reshape(2, 6, 1), hidden=torch.zeros(2, 6, 1), batch_size=[2, 6]
        )
        t = BurnInTransform(recurrent_module(), burn_in=2)
        assert t.out_keys == ["hidden"]
        out = t(data)
        assert out.batch_size == (2, 4)
        # Step 2 starts from the state after steps 0 and 1: x0 + x1.
        assert out["hidden"][:, 0, 0].tolist() == [1.0, 13.0]
        assert (out["hidden"][:, 1:] == 0).all()
        assert torch.equal(out["x"], data["x"][:, 2:])

    def test_missing_state_is_created(self):
        data = TensorDict(x=torch.ones(1, 4, 1), batch_size=[1, 4])
        module = TensorDictModule(
            lambda x: x.cumsum(-2), in_keys=["x"], out_keys=[("next", "hidden")]
        )
        out = BurnInTransform(module, burn_in=1, out_keys=["hidden"])(data)
        assert out["hidden"].shape == (1, 3, 1) and out["hidden"][0, 0, 0] == 1.0

    def test_in_replay_buffer(self):
        # Slices of 5 steps come flat ([num_slices * 5]); a reshape puts time last, then the
        # burn-in consumes the first 3 steps of each slice.
        rb = ReplayBuffer(
            storage=LazyTensorStorage(40), sampler=SliceSampler(slice_len=5), batch_size=10
        )
        rb.append_transform(lambda td: td.reshape(-1, 5))
        rb.append_transform(BurnInTransform(recurrent_module(), burn_in=3))
        done = torch.zeros(40, 1, dtype=torch.bool)
        done[9::10] = True
        rb.extend(
            TensorDict(
                x=torch.ones(40, 1),
                hidden=torch.zeros(40, 1),
                next=TensorDict(done=done, batch_size=[40]),
                batch_size=[40],
            )
        )
        sample = rb.sample()
        assert sample.batch_size == (2, 2) and (sample["hidden"][:, 0] == 3).all()

    def test_errors(self):
        with pytest.raises(ValueError, match="burn_in"):
            BurnInTransform(recurrent_module(), burn_in=0)
        with pytest.raises(ValueError, match="next"):
            BurnInTransform(TensorDictModule(lambda x: x, ["x"], ["y"]), burn_in=1)
        with pytest.raises(ValueError, match="shorter"):
            BurnInTransform(recurrent_module(), burn_in=4)(
                TensorDict(x=torch.ones(1, 4, 1), hidden=torch.zeros(1, 4, 1), batch_size=[1, 4])
            )
        with pytest.raises(RuntimeError, match="replay-buffer"):
            TransformedEnv(CountEnv(), BurnInTransform(recurrent_module(), burn_in=1))
