"""Timer, AutoResetTransform/AutoResetEnv, TerminateTransform, EndOfLifeTransform,
RandomTruncationTransform, BatchSizeTransform, NextObservationDelta, ExpandAs, Hash,
FlattenAction, DeviceCastTransform, PinMemoryTransform."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from torchrl.data import Bounded, Composite, LazyTensorStorage, TensorDictReplayBuffer, Unbounded
from torchrl.envs import EnvBase, PendulumEnv, check_env_specs
from torchrl.envs import transforms as T
from torchrl.envs.transforms import (
    AutoResetEnv,
    AutoResetTransform,
    BatchSizeTransform,
    Compose,
    DeviceCastTransform,
    EndOfLifeTransform,
    ExpandAs,
    FlattenAction,
    Hash,
    NextObservationDelta,
    PinMemoryTransform,
    RandomTruncationTransform,
    StepCounter,
    TerminateTransform,
    Timer,
    TransformedEnv,
)

NAMES = [
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "DeviceCastTransform",
    "EndOfLifeTransform",
    "ExpandAs",
    "FlattenAction",
    "Hash",
    "NextObservationDelta",
    "PinMemoryTransform",
    "RandomTruncationTransform",
    "TerminateTransform",
    "Timer",
]


@pytest.mark.parametrize("name", NAMES)
def test_exported(name):
    import torchrl.envs
    import torchrl.envs.transforms.transforms as legacy

    obj = getattr(T, name)
    assert getattr(torchrl.envs, name) is obj and getattr(legacy, name) is obj
    assert name in T.__all__ and name in torchrl.envs.__all__


def _buffer(transform: Any) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, transform=transform)


# ------------------------------------------------------------------------------------- Timer
class TestTimer:
    def test_measures_step_policy_reset(self):
        env = TransformedEnv(CountingEnv(batch_size=[2], max_steps=100), Timer())
        check_env_specs(env)

        def slow_policy(td):
            time.sleep(0.01)
            return env.rand_action(td)

        r = env.rollout(3, slow_policy)
        assert r["next", "time_step"].shape == (2, 3)
        assert (r["next", "time_step"] > 0).all()
        assert (r["next", "time_policy"] >= 0.009).all()
        assert (r["next", "time_reset"] == 0).all()
        assert (r["time_reset"][:, 0] > 0).all()
        assert (r["time_step"][:, 0] == 0).all() and (r["time_policy"][:, 0] == 0).all()
        assert r["next", "time_step"].dtype == torch.get_default_dtype()

    def test_custom_keys_and_errors(self):
        env = TransformedEnv(PendulumEnv(seed=0), Timer(time_key="t"))
        assert {"t_step", "t_policy", "t_reset"} <= set(env.observation_spec.keys())
        env = TransformedEnv(PendulumEnv(seed=0), Timer(out_keys=["a", "b", "c"]))
        assert env.rollout(2)["next", "a"].shape == (2,)
        with pytest.raises(ValueError, match="three keys"):
            Timer(out_keys=["a", "b"])
        with pytest.raises(RuntimeError, match="on its own"):
            Timer()(TensorDict())


# -------------------------------------------------------------------------------- AutoReset
class SelfResettingEnv(CountingEnv):
    """Counts steps and restarts by itself: the step that ends an episode returns count 0."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        self.count = torch.where(out["done"], 0, self.count)
        out["observation"] = self.count.float()
        return out


class TestAutoReset:
    def test_caches_and_fills(self):
        base = SelfResettingEnv(batch_size=[2], max_steps=torch.tensor([2, 3]))
        check_env_specs(AutoResetEnv(SelfResettingEnv(batch_size=[2], max_steps=2)))
        env = AutoResetEnv(base)
        assert isinstance(env.transform, AutoResetTransform)
        r = env.rollout(6, break_when_any_done=False)
        obs_next = r["next", "observation"].squeeze(-1)
        assert torch.isnan(obs_next[0, 1]) and torch.isnan(obs_next[1, 2])
        assert obs_next[0, 0] == 1 and obs_next[1, 1] == 2
        # the reset after a finished episode returns the cached first observation, without
        # resetting the base env again
        assert r["observation"][0, 2].item() == 0 and r["observation"][1, 3].item() == 0
        assert base.reset_calls == 1
        assert r["observation"][0].squeeze(-1).tolist() == [0, 1, 0, 1, 0, 1]

    def test_no_replace_and_fill_values(self):
        env = AutoResetEnv(SelfResettingEnv(max_steps=2), AutoResetTransform(replace=False))
        r = env.rollout(2)
        assert r["next", "observation"].squeeze(-1).tolist() == [1.0, 0.0]
        env = AutoResetEnv(SelfResettingEnv(max_steps=2), AutoResetTransform(fill_float=-5))
        assert env.rollout(2)["next", "observation"][-1].item() == -5
        assert AutoResetTransform(fill_int=3)._fill(torch.int64) == 3
        assert AutoResetTransform(fill_bool=True)._fill(torch.bool) is True

    def test_errors(self):
        with pytest.raises(ValueError, match="fill_float"):
            AutoResetTransform(fill_float="abc")
        env = TransformedEnv(SelfResettingEnv(max_steps=2), AutoResetTransform())
        with pytest.raises(RuntimeError, match="AutoResetEnv"):
            env.rollout(3)
        with pytest.raises(RuntimeError, match="first transform"):
            AutoResetEnv(SelfResettingEnv(), Compose(StepCounter(), AutoResetTransform()))
        with pytest.raises(RuntimeError, match="on its own"):
            AutoResetTransform()(TensorDict())


# -------------------------------------------------------------------------------- Terminate
class TestTerminate:
    def test_stops_rollout(self):
        env = TransformedEnv(
            CountingEnv(batch_size=[2], max_steps=100),
            TerminateTransform(lambda td: td["observation"] >= 3),
        )
        check_env_specs(env)
        r = env.rollout(10)
        assert r.shape == (2, 3)
        assert r["next", "terminated"][:, -1].all() and r["next", "done"][:, -1].all()
        assert not r["next", "terminated"][:, :-1].any()

    def test_write_done_false_and_scalar(self):
        t = TerminateTransform(lambda td: torch.tensor(True), write_done=False)
        env = TransformedEnv(CountingEnv(batch_size=[3], max_steps=100), t)
        td = env.rand_step(env.reset())
        assert td["next", "terminated"].all() and not td["next", "done"].any()

    def test_forward_and_errors(self):
        t = TerminateTransform(lambda td: td["reward"] > 0)
        td = TensorDict(
            next=TensorDict(
                reward=torch.tensor([[1.0], [0.0]]),
                terminated=torch.zeros(2, 1, dtype=torch.bool),
                done=torch.zeros(2, 1, dtype=torch.bool),
                batch_size=[2],
            ),
            batch_size=[2],
        )
        assert t(td)["next", "terminated"].squeeze(-1).tolist() == [True, False]
        with pytest.raises(TypeError, match="callable"):
            TerminateTransform(3)  # type: ignore[arg-type]
        bad = TransformedEnv(CountingEnv(), TerminateTransform(lambda td: td["observation"]))
        with pytest.raises(TypeError, match="booleans"):
            bad.rollout(2)
        wrong = TransformedEnv(
            CountingEnv(batch_size=[2]), TerminateTransform(lambda td: torch.ones(3, dtype=bool))
        )
        with pytest.raises(ValueError, match="broadcast"):
            wrong.rollout(2)


# ------------------------------------------------------------------------------ EndOfLife
class LivesEnv(CountingEnv):
    """A ``CountingEnv`` with Atari-style lives: one is lost every 2 steps (3 at reset)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.unwrapped = SimpleNamespace(ale=SimpleNamespace(lives=self.lives))

    def lives(self) -> torch.Tensor:
        return 3 - self.count // 2


class LivesInDataEnv(LivesEnv):
    """A ``LivesEnv`` that writes its lives in its outputs (``"lives"``, int64 ``[*B, 1]``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_spec["lives"] = Unbounded(shape=(*self.batch_size, 1), dtype=torch.int64)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        return super()._reset(tensordict, **kwargs).set("lives", self.lives())

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return super()._step(tensordict).set("lives", self.lives())


class TestEndOfLife:
    def test_lives_from_the_env_output_match_the_attribute(self):
        read = TransformedEnv(LivesEnv(batch_size=[2], max_steps=7), EndOfLifeTransform())
        given = TransformedEnv(
            LivesInDataEnv(batch_size=[2], max_steps=7), EndOfLifeTransform(eol_attribute=None)
        )
        check_env_specs(given)
        torch.manual_seed(0)
        a = read.rollout(10, break_when_any_done=False)
        torch.manual_seed(0)
        b = given.rollout(10, break_when_any_done=False)
        for key in ("lives", "end-of-life", ("next", "lives"), ("next", "end-of-life")):
            assert torch.equal(a[key], b[key]), key
        assert b["next", "end-of-life"].any()

    def test_lives_from_the_env_output_errors(self):
        with pytest.raises(KeyError, match="observation spec has no such entry"):
            TransformedEnv(LivesEnv(), EndOfLifeTransform(eol_attribute=None))
        with pytest.raises(ValueError, match="must be shaped like the done flag"):
            env = LivesInDataEnv(batch_size=[2])
            env.observation_spec["lives"] = Unbounded(shape=(2, 3), dtype=torch.int64)
            TransformedEnv(env, EndOfLifeTransform(eol_attribute=None))
        with pytest.raises(TypeError, match="dotted path or None"):
            EndOfLifeTransform(eol_attribute="")

    def test_signal(self):
        env = TransformedEnv(LivesEnv(batch_size=[2], max_steps=100), EndOfLifeTransform())
        check_env_specs(env)
        r = env.rollout(5)
        assert r["lives"][0].squeeze(-1).tolist() == [3, 3, 2, 2, 1]
        assert r["next", "end-of-life"][0].squeeze(-1).tolist() == [False, True, False, True, False]
        assert env.observation_spec["end-of-life"].dtype == torch.bool

    def test_done_counts_and_custom_attribute(self):
        base = CountingEnv(max_steps=2)
        base.n_lives = 5
        env = TransformedEnv(
            base, EndOfLifeTransform(eol_key="eol", lives_key="l", eol_attribute="n_lives")
        )
        r = env.rollout(5)
        assert r["next", "eol"].squeeze(-1).tolist() == [False, True]
        assert (r["l"] == 5).all()

    def test_errors(self):
        env = TransformedEnv(CountingEnv(), EndOfLifeTransform())
        with pytest.raises(AttributeError, match="unwrapped.ale.lives"):
            env.reset()
        with pytest.raises(KeyError, match="not in the env's done spec"):
            TransformedEnv(LivesEnv(), EndOfLifeTransform(done_key="nope"))
        with pytest.raises(RuntimeError, match="on its own"):
            EndOfLifeTransform()(TensorDict())


# -------------------------------------------------------------------------- RandomTruncation
class TestRandomTruncation:
    def test_spread_then_max(self):
        torch.manual_seed(0)
        t = RandomTruncationTransform(2, 4, prob=0.0)
        env = TransformedEnv(CountingEnv(batch_size=[16], max_steps=100), Compose(StepCounter(), t))
        td = env.reset()
        first = t.horizon.clone()
        assert ((first >= 1) & (first <= 4)).all() and first.unique().numel() > 1
        r = env.rollout(12, break_when_any_done=False, auto_reset=False, tensordict=td)
        counts, trunc = r["next", "step_count"], r["next", "truncated"]
        # the first episode of each sub-env ends at its spread-out horizon
        first_end = trunc.squeeze(-1).float().argmax(-1) + 1
        assert torch.equal(first_end, first.squeeze(-1))
        # with prob=0, every later horizon is max_horizon
        assert (t.horizon == 4).all() and counts.max() == 4
        assert torch.equal(r["next", "done"], trunc)
        check_env_specs(env)

    def test_random_later_horizons(self):
        torch.manual_seed(1)
        t = RandomTruncationTransform(1, 3, prob=1.0, first_episode_prob=1.0)
        env = TransformedEnv(CountingEnv(batch_size=[32], max_steps=100), Compose(StepCounter(), t))
        env.rollout(20, break_when_any_done=False)
        assert t.horizon.min() >= 1 and t.horizon.max() <= 3 and t.horizon.unique().numel() > 1

    def test_errors(self):
        with pytest.raises(ValueError, match="min_horizon"):
            RandomTruncationTransform(5, 2)
        with pytest.raises(ValueError, match="prob"):
            RandomTruncationTransform(1, 2, prob=2.0)
        with pytest.raises(KeyError, match="StepCounter"):
            TransformedEnv(CountingEnv(), RandomTruncationTransform(1, 2))
        with pytest.raises(RuntimeError, match="on its own"):
            RandomTruncationTransform(1, 2)(TensorDict())


# ------------------------------------------------------------------------------- BatchSize
class TestBatchSize:
    def test_expand_unlocked_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), BatchSizeTransform(batch_size=[3]))
        assert env.batch_size == (3,) and env.observation_spec.shape == (3,)
        check_env_specs(env)
        assert env.rollout(4).shape == (3, 4)

    def test_reshape(self):
        env = TransformedEnv(
            CountingEnv(batch_size=[2, 3], max_steps=100),
            BatchSizeTransform(reshape_fn=lambda td: td.reshape(-1)),
        )
        assert env.batch_size == (6,) and env.action_spec.shape == (6, 1)
        check_env_specs(env)
        r = env.rollout(3)
        assert r.shape == (6, 3) and (r["next", "observation"][:, -1] == 3).all()

    def test_reset_func(self):
        def reset_func(td, td_reset, env=None):
            assert env is not None
            return td_reset.expand(5).clone()

        env = TransformedEnv(
            PendulumEnv(seed=0),
            BatchSizeTransform(batch_size=[5], reset_func=reset_func, env_kwarg=True),
        )
        assert env.reset().batch_size == (5,)

    def test_errors(self):
        with pytest.raises(ValueError, match="exactly one"):
            BatchSizeTransform()
        with pytest.raises(ValueError, match="cannot be expanded"):
            TransformedEnv(CountingEnv(batch_size=[2]), BatchSizeTransform(batch_size=[3]))

    def test_forward(self):
        td = BatchSizeTransform(batch_size=[2, 3])(TensorDict(a=torch.ones(3, 1), batch_size=[3]))
        assert td.batch_size == (2, 3)


# -------------------------------------------------------------------- NextObservationDelta
class TestNextObservationDelta:
    def test_env_and_buffer_roundtrip(self):
        t = NextObservationDelta(delta_dtype=torch.float32)
        env = TransformedEnv(CountingEnv(batch_size=[2], max_steps=100), t)
        assert t.in_keys == ["observation"]
        assert env.observation_spec["delta", "observation"].dtype == torch.float32
        check_env_specs(env)
        r = env.rollout(4)
        assert (r["next", "delta", "observation"] == 1).all()
        rb = _buffer(NextObservationDelta(["observation"]))
        rb.extend(r.reshape(-1))
        assert "observation" not in rb.storage[0]["next"].keys()
        sample = rb.sample()
        assert torch.equal(sample["next", "observation"], sample["observation"] + 1)
        assert "delta" not in sample["next"].keys()

    def test_dtypes(self):
        t = NextObservationDelta(restore_dtype=torch.float64, drop_delta=False)
        td = TensorDict(
            obs=torch.zeros(2), next=TensorDict(delta=TensorDict(obs=torch.ones(2).half()))
        )
        out = t(td)
        assert out["next", "obs"].dtype == torch.float64 and ("next", "delta", "obs") in out.keys(
            True
        )
        with pytest.raises(TypeError, match="delta_dtype"):
            NextObservationDelta(delta_dtype="half")  # type: ignore[arg-type]
        with pytest.raises(KeyError, match="missing"):
            NextObservationDelta(["obs"])(TensorDict(obs=torch.zeros(2)))


# -------------------------------------------------------------------------------- ExpandAs
class TestExpandAs:
    def test_env(self):
        base = CountingEnv(batch_size=[2], max_steps=100)
        base.observation_spec["wide"] = Unbounded(shape=(2, 1, 3))
        base.observation_spec = base.observation_spec

        def reset(td, **kw):
            out = CountingEnv._reset(base, td)
            out["wide"] = torch.zeros(2, 1, 3)
            return out

        def step(td):
            out = CountingEnv._step(base, td)
            out["wide"] = torch.zeros(2, 1, 3)
            return out

        base._reset, base._step = reset, step  # type: ignore[method-assign]
        env = TransformedEnv(base, ExpandAs("observation", "wide", out_key="obs3"))
        assert env.observation_spec["obs3"].shape == (2, 1, 3)
        check_env_specs(env)
        r = env.rollout(2)
        assert torch.equal(r["next", "obs3"][..., 0, 2], r["next", "observation"].squeeze(-1))

    def test_forward_and_errors(self):
        td = TensorDict(a=torch.arange(2.0), b=torch.zeros(2, 4))
        assert torch.equal(ExpandAs("a", "b")(td)["a"], torch.arange(2.0)[:, None].expand(2, 4))
        with pytest.raises(ValueError, match="cannot be expanded"):
            ExpandAs("a", "b")(TensorDict(a=torch.zeros(3), b=torch.zeros(2, 4)))
        with pytest.raises(KeyError, match="'b'"):
            ExpandAs("a", "b")(TensorDict(a=torch.zeros(3)))
        with pytest.raises(KeyError, match="none of the env's specs"):
            TransformedEnv(CountingEnv(), ExpandAs("observation", "nope"))
        rb = _buffer(ExpandAs("a", "b", out_key="c"))
        rb.extend(TensorDict(a=torch.arange(6.0), b=torch.zeros(6, 2), batch_size=[6]))
        assert rb.sample()["c"].shape == (4, 2)


# ------------------------------------------------------------------------------------ Hash
class TestHash:
    def test_env_and_repertoire(self):
        t = Hash(in_keys=["observation"], out_keys=["hash"], seed=1)
        env = TransformedEnv(CountingEnv(batch_size=[2], max_steps=100), t)
        assert env.observation_spec["hash"].shape == (2, 4)
        check_env_specs(env)
        r = env.rollout(3)
        assert torch.equal(r["next", "hash"][0], r["next", "hash"][1])
        assert not torch.equal(r["next", "hash"][0, 0], r["next", "hash"][0, 1])
        value = t.get_input_from_hash(r["next", "hash"][0, 2])
        assert torch.equal(value, torch.tensor([3.0]))

    def test_reproducible_and_seeded(self):
        a = Hash.reproducible_hash("hello")
        assert torch.equal(a, Hash.reproducible_hash("hello")) and a.shape == (4,)
        assert not torch.equal(a, Hash.reproducible_hash("hello", seed=0))
        assert not torch.equal(a, Hash.reproducible_hash("hellp"))

    def test_strings_and_inverse(self):
        rep: dict = {}
        t = Hash(["s"], ["h"], in_keys_inv=["s"], out_keys_inv=["h"], repertoire=rep)
        td = TensorDict(batch_size=[2])
        td.set_non_tensor("s", "ab")
        out = t(td)
        assert out["h"].shape == (2, 4) and torch.equal(out["h"][0], out["h"][1])
        assert t.inv(TensorDict(h=out["h"], batch_size=[2])).get("s").tolist() == ["ab", "ab"]
        assert t.inv(TensorDict(h=out["h"][0]))["s"] == "ab"
        mixed = TensorDict(s=NonTensorStack("ab", "cd"), batch_size=[2])
        hashed = t(mixed)["h"]
        assert not torch.equal(hashed[0], hashed[1]) and torch.equal(hashed[0], out["h"][0])
        with pytest.raises(KeyError, match="not in the repertoire"):
            t.inv(TensorDict(h=torch.zeros(1, 4, dtype=torch.int64), batch_size=[1]))
        with pytest.raises(ValueError, match="in_keys and out_keys"):
            Hash([], [])
        with pytest.raises(TypeError, match="hash_fn"):
            Hash(["a"], ["b"], hash_fn=3)  # type: ignore[arg-type]

    def test_in_buffer(self):
        rb = _buffer(Hash(["obs"], ["h"]))
        rb.extend(TensorDict(obs=torch.arange(12.0).reshape(6, 2), batch_size=[6]))
        assert rb.sample()["h"].shape == (4, 4)


# ---------------------------------------------------------------------------- FlattenAction
class MatrixActionEnv(EnvBase):
    """Stateless: the action is a ``[*B, 2, 3]`` matrix; the observation is its row sums."""

    def __init__(self, batch_size: Any = ()) -> None:
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        self.observation_spec = Composite(observation=Unbounded(shape=(*b, 2)), shape=b)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*b, 2, 3))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _reset(self, tensordict: Any, **kwargs: Any) -> TensorDictBase:
        return TensorDict(observation=torch.zeros(*self.batch_size, 2), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"]
        assert action.shape[-2:] == (2, 3)
        return TensorDict(
            observation=action.sum(-1),
            reward=torch.zeros(*self.batch_size, 1),
            done=torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            batch_size=self.batch_size,
        )


class TestFlattenAction:
    def test_env(self):
        env = TransformedEnv(MatrixActionEnv(batch_size=[4]), FlattenAction())
        assert env.action_spec.shape == (4, 6) and isinstance(env.action_spec, Bounded)
        check_env_specs(env)
        td = env.reset()
        td["action"] = torch.linspace(-1, 1, 6).expand(4, 6)
        td = env.step(td)
        assert torch.allclose(
            td["next", "observation"][0], torch.linspace(-1, 1, 6).view(2, 3).sum(-1)
        )

    def test_positive_dims_and_out_keys(self):
        t = FlattenAction(0, 1, out_keys_inv=["flat"], allow_positive_dim=True)
        env = TransformedEnv(MatrixActionEnv(batch_size=[2]), t)
        keys = env.full_action_spec.keys()
        assert "flat" in keys and "action" not in keys
        assert env.rollout(2).shape == (2, 2)

    def test_forward_buffer_and_errors(self):
        # written (flat) actions are stored unflattened, samples come out flat
        rb = _buffer(FlattenAction(action_shape=[2, 3]))
        rb.extend(TensorDict(action=torch.arange(36.0).reshape(6, 6), batch_size=[6]))
        assert rb.storage[0]["action"].shape == (2, 3)
        assert rb.sample()["action"].shape == (4, 6)
        with pytest.raises(ValueError, match="negative"):
            FlattenAction(0, 1)
        with pytest.raises(RuntimeError, match="action_shape"):
            FlattenAction().inv(TensorDict(action=torch.zeros(6)))
        with pytest.raises(ValueError, match="unflattened"):
            FlattenAction(action_shape=[2, 3]).inv(TensorDict(action=torch.zeros(5)))
        with pytest.raises(KeyError, match="not in the env's action spec"):
            TransformedEnv(MatrixActionEnv(), FlattenAction(in_keys_inv=["nope"]))


# ------------------------------------------------------------------------- device transforms
class TestDeviceCast:
    def test_cpu_env_whole(self):
        env = TransformedEnv(PendulumEnv(seed=0), DeviceCastTransform("cpu"))
        assert env.device == torch.device("cpu")
        check_env_specs(env)
        assert env.rollout(2)["next", "observation"].dtype == torch.float32

    def test_meta_specs_and_forward(self):
        base = CountingEnv(batch_size=[2], device="cpu")
        t = DeviceCastTransform("meta")
        env = TransformedEnv(base, t)
        assert env.device == torch.device("meta")
        assert env.observation_spec["observation"].device == torch.device("meta")
        assert t.orig_device == torch.device("cpu")
        td = TensorDict(x=torch.ones(2, dtype=torch.float64), batch_size=[2], device="cpu")
        out = DeviceCastTransform("meta")(td)
        assert out.device == torch.device("meta") and out["x"].dtype == torch.float64

    def test_keys(self):
        t = DeviceCastTransform("meta", "cpu", in_keys=["a"], in_keys_inv=["b"])
        td = t(TensorDict(a=torch.ones(1), c=torch.ones(1)))
        assert td["a"].device.type == "meta" and td["c"].device.type == "cpu"
        back = DeviceCastTransform("cpu", "meta", in_keys_inv=["b"]).inv(
            TensorDict(b=torch.ones(1))
        )
        assert back["b"].device.type == "meta"
        env = TransformedEnv(CountingEnv(), DeviceCastTransform("meta", in_keys=["observation"]))
        assert env.observation_spec["observation"].device.type == "meta"
        assert env.reward_spec.device is None or env.reward_spec.device.type == "cpu"
        with pytest.raises(ValueError, match="destination"):
            DeviceCastTransform(None)  # type: ignore[arg-type]


class TestPinMemory:
    def test_pins_or_noop(self):
        td = TensorDict(obs=torch.ones(3), batch_size=[3])
        out = PinMemoryTransform()(td)
        assert out["obs"].is_pinned() == torch.cuda.is_available()
        env = TransformedEnv(PendulumEnv(seed=0), PinMemoryTransform())
        check_env_specs(env)
        r = env.rollout(2)
        assert torch.equal(r["next", "observation"], r["next", "observation"])
        rb = _buffer(PinMemoryTransform())
        rb.extend(TensorDict(obs=torch.ones(6), batch_size=[6]))
        assert rb.sample()["obs"].is_pinned() == torch.cuda.is_available()
