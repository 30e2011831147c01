"""Spec helpers, TED <-> nested / per-trajectory converters, DensifyReward, MultiStepTransform."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensordict import TensorDict

from torchrl.data import (
    Categorical,
    Composite,
    DensifyReward,
    H5Combine,
    H5Split,
    LazyTensorStorage,
    MultiStep,
    Nested2TED,
    NonTensor,
    ReplayBuffer,
    TED2Nested,
    Unbounded,
    check_no_exclusive_keys,
    clear_video_decoder_cache,
    consolidate_spec,
    contains_lazy_spec,
    set_video_decoder_cache_size,
)
from torchrl.envs.transforms.rb_transforms import MultiStepTransform

_has_h5py = importlib.util.find_spec("h5py") is not None


# ------------------------------------------------------------------------------ spec helpers
def _hetero():
    a = Composite(a=Unbounded(3), n=Composite(x=Unbounded((2, 4))))
    b = Composite(b=Categorical(4, shape=(2,)), s=NonTensor(shape=()))
    return torch.stack([a, b], 0)


def test_contains_lazy_spec():
    assert not contains_lazy_spec(Composite(a=Unbounded(3), n=Composite(b=Unbounded(1))))
    assert contains_lazy_spec(torch.stack([Unbounded(3), Unbounded(4)], 0))
    # found at any depth
    deep = Composite(n=Composite(m=torch.stack([Unbounded(3), Unbounded(4)], 0), shape=(2,)))
    assert contains_lazy_spec(deep)
    assert contains_lazy_spec(_hetero())
    with pytest.raises(TypeError, match="TensorSpec"):
        contains_lazy_spec({"a": 1})


def test_check_no_exclusive_keys():
    same = torch.stack([Composite(a=Unbounded(3)), Composite(a=Unbounded(4))], 0)
    assert check_no_exclusive_keys(same)
    assert check_no_exclusive_keys(Composite(a=Unbounded(3)))
    assert not check_no_exclusive_keys(_hetero())
    # exclusive keys nested one level down: seen with recurse only
    nested = torch.stack(
        [Composite(n=Composite(x=Unbounded(1))), Composite(n=Composite(y=Unbounded(1)))], 0
    )
    assert not check_no_exclusive_keys(nested)
    assert check_no_exclusive_keys(nested, recurse=False)
    # a lazy stack inside a Composite entry
    assert not check_no_exclusive_keys(Composite(group=_hetero(), shape=()))
    assert check_no_exclusive_keys(Composite(group=_hetero(), shape=()), recurse=False)


def test_consolidate_spec_fills_exclusive_keys():
    spec = _hetero()
    out = consolidate_spec(spec)
    assert check_no_exclusive_keys(out)
    assert not check_no_exclusive_keys(spec)  # the input is left alone
    first, second = out[0], out[1]
    assert set(first.keys()) == set(second.keys()) == {"a", "n", "b", "s"}
    # the added entries: same dtype and ndim, zero-sized feature dims
    assert second["a"].shape == torch.Size([0]) and second["a"].dtype == torch.float32
    assert second["n", "x"].shape == torch.Size([0, 0])
    assert first["b"].shape == torch.Size([0]) and first["b"].dtype == torch.int64
    assert isinstance(first["s"], NonTensor)
    # the originals are kept
    assert first["a"] == Unbounded(3) and second["b"] == Categorical(4, shape=(2,))
    td = out.rand()
    assert td.batch_size == torch.Size([2])
    assert td[1]["a"].shape == torch.Size([0])


def test_consolidate_spec_recursion_flags():
    nested = torch.stack(
        [Composite(n=Composite(x=Unbounded(1))), Composite(n=Composite(y=Unbounded(1)))], 0
    )
    assert check_no_exclusive_keys(consolidate_spec(nested))
    shallow = consolidate_spec(nested, recurse_through_stack=False)
    assert not check_no_exclusive_keys(shallow)
    wrapped = Composite(group=_hetero(), shape=())
    assert check_no_exclusive_keys(consolidate_spec(wrapped))
    assert not check_no_exclusive_keys(consolidate_spec(wrapped, recurse_through_entries=False))
    with pytest.raises(TypeError, match="Composite"):
        consolidate_spec(Unbounded(3))


# ------------------------------------------------------------------------------ TED converters
def _ted(done=(False, True, False, False, True)):
    n = len(done)
    flags = torch.tensor(done).unsqueeze(-1)
    return TensorDict(
        observation=torch.arange(n * 3, dtype=torch.float32).view(n, 3),
        action=torch.arange(n),
        next=TensorDict(
            observation=torch.arange(n * 3, dtype=torch.float32).view(n, 3) + 100,
            reward=torch.ones(n, 1),
            done=flags,
            batch_size=[n],
        ),
        batch_size=[n],
    )


def test_ted2nested_rows_are_trajectories():
    data = _ted()
    nested = TED2Nested()(data)
    assert nested.batch_size == torch.Size([2])
    rows = nested["action"].unbind(0)
    assert [r.tolist() for r in rows] == [[0, 1], [2, 3, 4]]
    obs_rows = nested["next", "observation"].unbind(0)
    assert torch.equal(obs_rows[1], data["next", "observation"][2:])
    # a trajectory left open at the end of the data is kept
    nested = TED2Nested()(_ted((True, False, False)))
    assert [r.tolist() for r in nested["action"].unbind(0)] == [[0], [1, 2]]


def test_ted2nested_batched_rows_do_not_merge():
    data = TensorDict(
        obs=torch.arange(6).view(2, 3),
        next=TensorDict(done=torch.zeros(2, 3, 1, dtype=torch.bool), batch_size=[2, 3]),
        batch_size=[2, 3],
    )
    nested = TED2Nested()(data)
    assert [r.tolist() for r in nested["obs"].unbind(0)] == [[0, 1, 2], [3, 4, 5]]


def test_ted_nested_round_trip_and_errors():
    data = _ted()
    back = Nested2TED()(TED2Nested()(data))
    assert back.batch_size == data.batch_size
    assert (back == data).all()
    # custom done key
    data = _ted()
    data["next", "end"] = data["next", "done"].clone()
    data["next", "done"].zero_()
    nested = TED2Nested(done_key=("next", "end"))(data)
    assert nested.batch_size == torch.Size([2])
    assert (Nested2TED(done_key=("next", "end"))(nested) == data).all()
    with pytest.raises(KeyError, match="missing"):
        TED2Nested(done_key="missing")(data)
    with pytest.raises(ValueError, match="time"):
        TED2Nested()(TensorDict(a=torch.zeros(()), batch_size=[]))
    # trajectory 0 not ending with done would merge into trajectory 1
    open_rows = TED2Nested()(
        TensorDict(
            obs=torch.arange(4).view(2, 2),
            next=TensorDict(done=torch.zeros(2, 2, 1, dtype=torch.bool)),
            batch_size=[2, 2],
        )
    )
    with pytest.raises(ValueError, match="trajectory 0"):
        Nested2TED()(open_rows)
    with pytest.raises(TypeError, match="TensorDict"):
        Nested2TED()(torch.zeros(3))


def test_ted_nested_as_storage_save_and_load_hooks(tmp_path):
    data = _ted()
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    rb.extend(data)
    rb.storage.checkpointer.register_save_hook(TED2Nested())
    rb.dumps(tmp_path)
    restored = ReplayBuffer(storage=LazyTensorStorage(5))
    restored.storage.checkpointer.register_load_hook(Nested2TED())
    restored.loads(tmp_path)
    assert (restored.storage[:5] == data).all()


def test_h5split_h5combine_in_memory():
    data = _ted()
    for source in (data, TED2Nested()(data)):
        split = H5Split()(source)
        assert sorted(split.keys()) == ["traj_0", "traj_1"]
        assert split["traj_0"].batch_size == torch.Size([2])
        assert torch.equal(split["traj_1", "next", "observation"], data["next", "observation"][2:])
        combined = H5Combine()(split)
        assert (combined == data).all()
    with pytest.raises(ValueError, match="traj_"):
        H5Combine()(TensorDict(other=TensorDict(a=torch.zeros(2), batch_size=[2])))
    with pytest.raises(ValueError, match="path"):
        H5Combine()(None)
    bad = H5Split()(data)
    bad["traj_1"] = bad["traj_1"].exclude("action")
    with pytest.raises(ValueError, match="traj_1"):
        H5Combine()(bad)


@pytest.mark.skipif(_has_h5py, reason="checks the error raised without h5py")
def test_h5_without_h5py_names_the_extra(tmp_path):
    with pytest.raises(ImportError, match=r"torchrl\[h5py\]"):
        H5Split()(_ted(), tmp_path)
    with pytest.raises(ImportError, match=r"torchrl\[h5py\]"):
        H5Combine()(None, tmp_path)


@pytest.mark.skipif(not _has_h5py, reason="h5py is not installed")
def test_h5_file_round_trip(tmp_path):
    data = _ted()
    H5Split()(data, tmp_path)
    assert (tmp_path / "trajectories.h5").exists()
    back = H5Combine()(None, tmp_path)
    assert (back == data).all()
    target = tmp_path / "custom.h5"
    H5Split()(TED2Nested()(data), target)
    assert (H5Combine()(None, target) == data).all()


# ------------------------------------------------------------------------------ DensifyReward
def test_densify_reward():
    reward = torch.tensor([0.0, 0.0, 1.0, 0.0, 2.0]).view(1, 5, 1)
    done = torch.tensor([False, False, True, False, True]).view(1, 5, 1)
    data = TensorDict(reward=reward, done=done, batch_size=[1, 5])
    out = DensifyReward(time_dim=1, discount=0.5, reward_key_out="dense")(data)
    assert out is data
    torch.testing.assert_close(out["dense"].view(-1), torch.tensor([0.25, 0.5, 1.0, 1.0, 2.0]))
    assert torch.equal(out["reward"], reward)  # not overwritten with reward_key_out
    DensifyReward(time_dim=-2)(data)
    assert data["reward"].view(-1).tolist() == [1.0, 1.0, 1.0, 2.0, 2.0]


def test_densify_reward_default_time_dim_and_errors():
    # the default time_dim (2) fits data of batch [B, N, T] with a trailing reward dim
    reward = torch.zeros(2, 3, 4, 1)
    reward[..., -1, :] = 1.0
    done = torch.zeros(2, 3, 4, 1, dtype=torch.bool)
    done[..., -1, :] = True
    data = TensorDict(
        next=TensorDict(reward=reward, done=done, batch_size=[2, 3, 4]), batch_size=[2, 3, 4]
    )
    DensifyReward(reward_key=("next", "reward"), done_key=("next", "done"))(data)
    assert (data["next", "reward"] == 1).all()
    with pytest.raises(KeyError, match="reward"):
        DensifyReward()(TensorDict(done=done, batch_size=[2]))
    with pytest.raises(ValueError, match="time_dim"):
        DensifyReward(time_dim=7)(TensorDict(reward=reward, done=done, batch_size=[2]))
    with pytest.raises(ValueError, match="broadcast"):
        DensifyReward(time_dim=1)(
            TensorDict(reward=torch.zeros(2, 3), done=torch.zeros(2, 2, dtype=torch.bool))
        )
    with pytest.raises(ValueError, match="discount"):
        DensifyReward(discount=2.0)


# ------------------------------------------------------------------------------ MultiStepTransform
def _steps(start, n, done_at=()):
    done = torch.zeros(n, 1, dtype=torch.bool)
    for i in done_at:
        if start <= i < start + n:
            done[i - start] = True
    obs = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    return TensorDict(
        observation=obs,
        next=TensorDict(
            observation=obs + 1,
            reward=obs.clone(),  # reward of step t is t: makes sums easy to check
            done=done,
            batch_size=[n],
        ),
        batch_size=[n],
    )


def test_multistep_transform_matches_multistep_on_the_whole_stream():
    n_steps, gamma = 3, 0.9
    transform = MultiStepTransform(n_steps, gamma)
    whole = torch.cat([_steps(0, 5, done_at=(6,)), _steps(5, 5, done_at=(6,))], 0)
    expected = MultiStep(gamma, n_steps)(whole.clone())
    outs = [transform.inv(_steps(0, 5, done_at=(6,))), transform.inv(_steps(5, 5, done_at=(6,)))]
    assert [o.batch_size[0] for o in outs] == [2, 5]
    got = torch.cat(outs, 0)
    # the returns of steps 0..6 do not depend on the batch cut at step 5
    for key in (("next", "reward"), ("next", "observation"), "steps_to_next_obs", "gamma"):
        torch.testing.assert_close(got[key], expected[:7][key])
    # the original reward is kept
    assert torch.equal(got["next", "original_reward"], whole["next", "reward"][:7])


def test_multistep_transform_in_replay_buffer_and_settings():
    transform = MultiStepTransform(2, 1.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(20), transform=transform, batch_size=4)
    rb.extend(_steps(0, 4))
    assert len(rb) == 2
    rb.extend(_steps(4, 4))
    assert len(rb) == 6
    stored = rb.storage[:6]
    assert stored["observation"].view(-1).tolist() == [0, 1, 2, 3, 4, 5]
    # reward of step t: t + (t+1) + (t+2)
    assert stored["next", "reward"].view(-1).tolist() == [3, 6, 9, 12, 15, 18]
    sample = rb.sample()
    assert sample.batch_size == torch.Size([4])
    # changing n_steps drops what was held
    transform.n_steps = 0
    assert transform.inv(_steps(0, 3)).batch_size == torch.Size([3])
    # a batch shorter than n_steps is held entirely
    short = MultiStepTransform(4, 1.0)
    assert short.inv(_steps(0, 2)).batch_size == torch.Size([0])
    assert short.inv(_steps(2, 4)).batch_size == torch.Size([2])
    with pytest.raises(ValueError, match="n_steps"):
        MultiStepTransform(-1, 0.9)
    with pytest.raises(ValueError, match="one reward key"):
        MultiStepTransform(1, 0.9, reward_keys=["a", "b"])
    batched = MultiStepTransform(1, 1.0)
    batched.inv(_steps(0, 3).expand(2, 3).clone())
    with pytest.raises(ValueError, match="continue"):
        batched.inv(_steps(0, 3).expand(3, 3).clone())


def test_multistep_transform_refuses_envs():
    from torchrl.envs import PendulumEnv
    from torchrl.envs.transforms import TransformedEnv

    with pytest.raises(RuntimeError, match="replay-buffer"):
        TransformedEnv(PendulumEnv(), MultiStepTransform(2, 0.9))


# ------------------------------------------------------------------------------ video cache exports
def test_video_cache_helpers_exported_from_data():
    from torchrl.data import replay_buffers

    assert clear_video_decoder_cache is replay_buffers.clear_video_decoder_cache
    assert set_video_decoder_cache_size is replay_buffers.set_video_decoder_cache_size
