"""Env-side behaviours TorchRL users rely on (issue 17)."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import PendulumEnv, TransformedEnv
from torchrl.envs.transforms import StepCounter


class _EnvWithExtras(PendulumEnv):
    """A custom env with a method and a field of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.custom_field = 7

    def twice(self, g: float = 10.0) -> float:
        return g * 2


def test_random_policy_from_modules():
    import torchrl.envs.utils
    from torchrl.modules import RandomPolicy

    assert RandomPolicy is torchrl.envs.utils.RandomPolicy


def test_spec_unbatched():
    env = PendulumEnv(batch_size=[3, 2])
    assert env.action_spec_unbatched.shape == env.action_spec.shape[2:]
    assert env.full_action_spec_unbatched.shape == torch.Size([])
    assert env.observation_spec_unbatched["th"].shape == env.observation_spec["th"].shape[2:]
    assert env.reward_spec_unbatched.shape == torch.Size([1])
    assert env.done_spec_unbatched.shape == torch.Size([])
    assert env.full_done_spec_unbatched["done"].shape == torch.Size([1])
    assert env.full_observation_spec_unbatched.shape == torch.Size([])
    assert env.full_state_spec_unbatched.shape == torch.Size([])
    assert env.action_spec_unbatched.rand().shape == torch.Size([1])
    # Unbatched env: the specs themselves.
    single = PendulumEnv()
    assert single.action_spec_unbatched == single.action_spec
    # Through a TransformedEnv.
    tenv = TransformedEnv(PendulumEnv(batch_size=[4]), StepCounter())
    assert tenv.observation_spec_unbatched["step_count"].shape == torch.Size([1])


def test_transformed_env_forwards_unknown_attributes():
    env = TransformedEnv(_EnvWithExtras(), StepCounter())
    assert env.twice(1.5) == 3.0
    # PendulumEnv's own ``gen_params``, as in TorchRL's pendulum tutorial.
    assert "params" in env.gen_params(batch_size=[]).keys()
    assert env.custom_field == 7
    with pytest.raises(AttributeError, match="no attribute 'not_there'"):
        env.not_there  # noqa: B018
    with pytest.raises(AttributeError):
        env._private_missing  # noqa: B018
    # Own attributes are not shadowed by the base env's.
    assert env.transform is not None
    # No recursion without a base env (as during unpickling).
    bare = TransformedEnv.__new__(TransformedEnv)
    with pytest.raises(AttributeError):
        bare.twice  # noqa: B018
    clone = pickle.loads(pickle.dumps(env))
    assert clone.twice(2.0) == 4.0


def test_terminated_or_truncated():
    from torchrl.envs import terminated_or_truncated

    data = TensorDict(
        done=torch.tensor([[False], [False]]),
        terminated=torch.tensor([[False], [True]]),
        agents=TensorDict(truncated=torch.tensor([[False], [False]]), batch_size=[2]),
        batch_size=[2],
    )
    assert terminated_or_truncated(data)
    assert data["_reset"].squeeze(-1).tolist() == [False, True]
    assert ("agents", "_reset") not in data.keys(True)
    assert terminated_or_truncated(data, write_full_false=True)
    assert data["agents", "_reset"].squeeze(-1).tolist() == [False, False]
    # key=None: only the answer.
    fresh = TensorDict(done=torch.tensor([[True]]), batch_size=[1])
    assert terminated_or_truncated(fresh, key=None)
    assert list(fresh.keys()) == ["done"]
    # From the env's spec, with a custom key.
    env = PendulumEnv()
    td = env.full_done_spec.zero()
    td["truncated"] = torch.tensor([True])
    assert terminated_or_truncated(td, env.full_done_spec, key="stop")
    assert td["stop"].tolist() == [True]
    # An existing entry is kept.
    td["truncated"] = torch.tensor([False])
    td["terminated"] = torch.tensor([True])
    terminated_or_truncated(td, env.full_done_spec, key="stop")
    assert td["stop"].tolist() == [True]


def test_make_composite_from_td():
    from torchrl.envs import make_composite_from_td

    data = TensorDict(
        obs=torch.zeros(2, 3),
        action=torch.zeros(2, 4, dtype=torch.int64),
        next=TensorDict(reward=torch.zeros(2, 1), batch_size=[2]),
        batch_size=[2],
    )
    spec = make_composite_from_td(data)
    assert spec.shape == torch.Size([2])
    assert spec["action"].dtype == torch.int64
    assert spec["next", "reward"].shape == torch.Size([2, 1])
    assert spec.is_in(data)
    scalar = make_composite_from_td(TensorDict(x=torch.tensor(1.0)))
    assert scalar["x"].shape == torch.Size([1])
    assert make_composite_from_td(TensorDict(x=torch.tensor(1.0)), unsqueeze_null_shapes=False)[
        "x"
    ].shape == torch.Size([])
    with pytest.raises(NotImplementedError):
        make_composite_from_td(data, dynamic_shape=True)


def test_get_available_libraries():
    from torchrl.envs import get_available_libraries
    from torchrl.envs.libs import get_available_libraries as from_libs

    assert from_libs is get_available_libraries
    available = get_available_libraries()
    assert isinstance(available, set)
    from torchrl.envs.libs import _LIBRARIES

    assert available <= set(_LIBRARIES) and "gym" in available


def test_batched_env_keywords():
    from torchrl.envs import ParallelEnv, SerialEnv

    env = SerialEnv(
        2,
        PendulumEnv,
        shared_memory=False,
        mp_start_method="spawn",
        num_sub_threads=2,
        serial_for_single=True,
        non_blocking=True,
        share_individual_td=False,
        allow_step_when_done=False,
        device="cpu",
        pin_memory=not torch.cuda.is_available(),
    )
    assert env.rollout(2).batch_size == torch.Size([2, 2])
    env.close()
    single = ParallelEnv(1, PendulumEnv, serial_for_single=True, num_sub_threads=1)
    assert isinstance(single, SerialEnv)
    assert single.batch_size == torch.Size([1])
    # Values this library cannot honour are refused, never ignored.
    with pytest.raises(NotImplementedError, match="share_individual_td"):
        SerialEnv(2, PendulumEnv, share_individual_td=True)
    with pytest.raises(NotImplementedError, match="allow_step_when_done"):
        ParallelEnv(2, PendulumEnv, allow_step_when_done=True)
    with pytest.raises(NotImplementedError, match="device"):
        SerialEnv(2, PendulumEnv, device="meta")
    parallel = ParallelEnv(2, PendulumEnv, non_blocking=True, num_threads=torch.get_num_threads())
    assert not isinstance(parallel, SerialEnv) and parallel.non_blocking
    parallel.close()


def test_tensor_storage_takes_python_numbers():
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, ListStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4)
    assert rb.extend(range(10)).tolist() == list(range(10))
    rb.add(3)
    assert rb[:].tolist() == [*range(10), 3]
    assert rb.sample().dtype == torch.int64
    floats = ReplayBuffer(storage=LazyMemmapStorage(5))
    floats.extend([0.5, 1.5])
    assert floats[:].tolist() == [0.5, 1.5]
    storage = LazyTensorStorage(5)
    storage.set(slice(0, 3), range(3))
    assert storage[:3].tolist() == [0, 1, 2]
    # A ListStorage keeps the Python objects.
    objects = ReplayBuffer(storage=ListStorage(5))
    objects.extend([1, 2])
    assert objects[0] == 1 and not isinstance(objects[0], torch.Tensor)
