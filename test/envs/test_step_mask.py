"""The ``"_step"`` mask of ``EnvBase.step``: sub-envs marked ``False`` are not stepped."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict, TensorDictBase

from torchrl.envs import ParallelEnv, PendulumEnv, SerialEnv, StepCounter, TransformedEnv
from torchrl.envs.common import STEP_MASK, EnvBase


def _ones(batch: tuple[int, ...]) -> torch.Tensor:
    return torch.ones(*batch, 1, dtype=torch.int64)


def _batched(kind: str, n: int = 2, **kwargs: Any) -> EnvBase:
    cls = SerialEnv if kind == "serial" else ParallelEnv
    return cls(n, CountingEnv, create_env_kwargs=kwargs or None)


class TestStateless:
    def test_partial_step_keeps_the_skipped_inputs(self) -> None:
        env = PendulumEnv(batch_size=[3], seed=0)
        td = env.rand_action(env.reset())
        th = td["th"].clone()
        td[STEP_MASK] = torch.tensor([True, False, True])
        out = env.step(td)
        assert STEP_MASK not in out.keys()
        assert bool((out["next", "th"][1] == th[1]).all())
        assert not bool((out["next", "th"][[0, 2]] == th[[0, 2]]).all())
        assert out["next", "reward"][1].item() == 0.0
        assert not bool(out["next", "done"][1])

    def test_done_shaped_mask_and_no_step(self) -> None:
        env = PendulumEnv(batch_size=[2], seed=0)
        td = env.rand_action(env.reset())
        td[STEP_MASK] = torch.zeros(2, 1, dtype=torch.bool)
        out = env.step(td)
        assert bool((out["next", "th"] == out["th"]).all())
        assert bool((out["next", "reward"] == 0).all())

    def test_bad_masks(self) -> None:
        env = PendulumEnv(batch_size=[2], seed=0)
        td = env.rand_action(env.reset())
        with pytest.raises(ValueError, match="'_step'.*bool tensor, got torch.int64"):
            env.step(td.clone().set(STEP_MASK, torch.ones(2, dtype=torch.int64)))
        with pytest.raises(ValueError, match=r"'_step'.*shape \[2, 2\].*\[2\]"):
            env.step(td.clone().set(STEP_MASK, torch.ones(2, 2, dtype=torch.bool)))


class TestStatefulSingle:
    def test_all_or_nothing(self) -> None:
        env = CountingEnv(batch_size=[2])
        td = env.reset().set("action", _ones((2,)))
        td[STEP_MASK] = torch.zeros(2, dtype=torch.bool)
        out = env.step(td)
        assert env.count.squeeze(-1).tolist() == [0, 0]
        assert out["next", "observation"].squeeze(-1).tolist() == [0.0, 0.0]
        td = out.exclude("next").set(STEP_MASK, torch.ones(2, dtype=torch.bool))
        env.step(td)
        assert env.count.squeeze(-1).tolist() == [1, 1]

    def test_partial_refused(self) -> None:
        env = CountingEnv(batch_size=[2])
        td = env.reset().set("action", _ones((2,)))
        td[STEP_MASK] = torch.tensor([True, False])
        with pytest.raises(ValueError, match="CountingEnv.*batch-locked.*SerialEnv"):
            env.step(td)
        assert env.count.squeeze(-1).tolist() == [0, 0]


@pytest.mark.parametrize("kind", ["serial", "parallel"])
class TestBatched:
    def test_only_marked_workers_step(self, kind: str) -> None:
        env = _batched(kind)
        try:
            td = env.reset()
            for t in range(4):
                td = td.set("action", _ones((2,)))
                td[STEP_MASK] = torch.tensor([t % 2 == 0, True])
                td = env.step(td)
                assert STEP_MASK not in td.keys()
                td = td["next"].exclude("reward").clone()
            # worker 0 stepped at t = 0 and 2 only; its count (the observation) is 2
            assert td["observation"].squeeze(-1).tolist() == [2.0, 4.0]
        finally:
            env.close()

    def test_step_and_maybe_reset(self, kind: str) -> None:
        env = _batched(kind, max_steps=2)
        try:
            td = env.reset()
            done_seen = []
            for _ in range(3):
                td = td.set("action", _ones((2,)))
                td[STEP_MASK] = torch.tensor([False, True])
                transition, td = env.step_and_maybe_reset(td)
                done_seen.append(transition["next", "done"].squeeze(-1).tolist())
            # worker 1 finishes at its 2nd step and is reset; worker 0 never moves
            assert done_seen == [[False, False], [False, True], [False, False]]
            assert td["observation"].squeeze(-1).tolist() == [0.0, 1.0]
        finally:
            env.close()

    def test_transformed_env(self, kind: str) -> None:
        # A mask on a TransformedEnv: the transforms' entries of a skipped sub-env are kept too.
        env = TransformedEnv(_batched(kind), StepCounter())
        try:
            td = env.reset()
            for _ in range(2):
                td = td.set("action", _ones((2,)))
                td[STEP_MASK] = torch.tensor([True, False])
                td = env.step(td)
                td = td["next"].exclude("reward").clone()
            assert td["step_count"].squeeze(-1).tolist() == [2, 0]
            assert td["observation"].squeeze(-1).tolist() == [2.0, 0.0]
        finally:
            env.close()

    def test_rollout_with_masking_policy(self, kind: str) -> None:
        env = _batched(kind, max_steps=10)

        def policy(td: TensorDictBase) -> TensorDictBase:
            td.set("action", _ones((2,)))
            return td.set(STEP_MASK, torch.tensor([True, False]))

        try:
            r = env.rollout(3, policy, break_when_any_done=False)
            assert r["next", "observation"][:, -1].squeeze(-1).tolist() == [3.0, 0.0]
            assert r["next", "reward"].sum(-2).squeeze(-1).tolist() == [3.0, 0.0]
        finally:
            env.close()


def test_serial_inner_mask_goes_to_the_worker_env() -> None:
    env = SerialEnv(2, lambda: PendulumEnv(batch_size=[2], seed=0))
    td = env.rand_action(env.reset())
    th = td["th"].clone()
    td[STEP_MASK] = torch.tensor([[True, False], [False, False]])
    out = env.step(td)
    kept = out["next", "th"] == th
    assert kept[0, 1] and kept[1].all() and not kept[0, 0]
    env.close()


def test_parallel_inner_partial_mask_refused() -> None:
    env = ParallelEnv(2, lambda: CountingEnv(batch_size=[2]))
    try:
        td = env.reset().set("action", _ones((2, 2)))
        td[STEP_MASK] = torch.tensor([[True, False], [True, True]])
        with pytest.raises(ValueError, match=r"worker\(s\) \[0\].*mark them all alike"):
            env.step(td)
    finally:
        env.close()


def test_no_mask_is_the_plain_step() -> None:
    env = CountingEnv(batch_size=[2])
    td = env.reset().set("action", _ones((2,)))
    out = env.step(TensorDict(td.to_dict(), batch_size=[2]))
    assert out["next", "observation"].squeeze(-1).tolist() == [1.0, 1.0]
