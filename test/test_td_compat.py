"""torchrl._td_compat: the private fast path and the public fallback give the same TensorDicts."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl import _td_compat as compat


def _source() -> dict:
    return {
        "obs": torch.arange(6.0).reshape(3, 2),
        "done": torch.tensor([[True], [False], [True]]),
        "nested": TensorDict({"x": torch.ones(3, 4)}, batch_size=[3]),
    }


def test_fast_path_is_used_on_the_installed_tensordict():
    # The installed tensordict is one the private names were checked against: a silent
    # fallback would cost speed without any test noticing.
    assert compat.FAST


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("nested", [True, False])
def test_new_unchecked_matches_public(device, nested):
    fast = compat.new_unchecked(_source(), batch_size=torch.Size([3]), device=device, nested=nested)
    public = compat.public_new_unchecked(
        _source(), batch_size=torch.Size([3]), device=device, nested=nested
    )
    assert type(fast) is type(public) is TensorDict
    assert fast.batch_size == public.batch_size == torch.Size([3])
    assert fast.device == public.device
    assert set(fast.keys(True, True)) == set(public.keys(True, True))
    assert (fast == public).all()


def test_new_unchecked_converts_nested_dicts_like_public():
    source = {"a": {"b": torch.zeros(2, 1)}}
    fast = compat.new_unchecked(source, batch_size=torch.Size([2]))
    public = compat.public_new_unchecked(source, batch_size=torch.Size([2]))
    assert isinstance(fast["a"], TensorDict) and isinstance(public["a"], TensorDict)
    assert fast["a"].batch_size == public["a"].batch_size == torch.Size([2])
    assert (fast == public).all()


@pytest.mark.parametrize("validated", [True, False])
def test_set_unchecked_matches_public(validated):
    fast = TensorDict(_source(), batch_size=[3])
    public = TensorDict(_source(), batch_size=[3])
    value = torch.full((3, 5), 2.0)
    out_fast = compat.set_unchecked(fast, "new", value, inplace=False, validated=validated)
    out_public = compat.public_set_unchecked(
        public, "new", value, inplace=False, validated=validated
    )
    assert out_fast is fast and out_public is public
    assert (fast == public).all()
    # overwriting a key replaces its tensor in both
    compat.set_unchecked(fast, "obs", torch.zeros(3, 2), inplace=False, validated=validated)
    compat.public_set_unchecked(
        public, "obs", torch.zeros(3, 2), inplace=False, validated=validated
    )
    assert (fast["obs"] == 0).all() and (public["obs"] == 0).all()


def test_entries_matches_public():
    td = TensorDict(_source(), batch_size=[3])
    fast, public = compat.entries(td), compat.public_entries(td)
    assert set(fast) == set(public) == {"obs", "done", "nested"}
    for key in fast:
        assert fast[key] is public[key]


def test_plain_entries_only_for_plain_tensordicts():
    td = TensorDict(_source(), batch_size=[3])
    assert compat.plain_entries(td) is not None
    stacked = LazyStackedTensorDict.lazy_stack([td[0], td[1]])
    assert compat.plain_entries(stacked) is None


def test_public_fallback_runs_the_library():
    """With TORCHRL_TENSORDICT_PUBLIC_API=1 the library uses the public API and rolls out the same data."""
    script = textwrap.dedent(
        """
        import torch
        from torchrl import _td_compat
        from torchrl.envs import GymEnv, step_mdp
        from torchrl.collectors import SyncDataCollector
        from torchrl.data import ReplayBuffer, LazyTensorStorage
        env = GymEnv("CartPole-v1")
        env.set_seed(0)
        torch.manual_seed(0)
        roll = env.rollout(20)
        col = SyncDataCollector(env, None, frames_per_batch=16, total_frames=16)
        batch = next(iter(col))
        col.shutdown()
        rb = ReplayBuffer(storage=LazyTensorStorage(100))
        rb.extend(roll)
        print(_td_compat.FAST, float(roll["observation"].sum()), float(roll["next", "reward"].sum()),
              tuple(batch.batch_size), len(rb), tuple(step_mdp(roll).batch_size))
        """
    )
    pytest.importorskip("gymnasium")
    outs = []
    for flag in ("0", "1"):
        env = dict(os.environ, TORCHRL_TENSORDICT_PUBLIC_API=flag)
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split())
    assert outs[0][0] == "True" and outs[1][0] == "False"
    assert outs[0][1:] == outs[1][1:]
