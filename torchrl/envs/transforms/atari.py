"""Atari-style frame skipping with a max over the last frames: :class:`MaxPoolFrameSkip`.

The DQN preprocessing (Mnih et al. 2015) repeats each action 4 times and shows the agent the
element-wise max of the last two emulator frames, because the Atari 2600 draws some sprites on
alternate frames only. :class:`~torchrl.envs.transforms.FrameSkipTransform` repeats actions;
this transform does the same and, in the same loop, keeps the last ``pool`` frames of the
entries it pools, so nothing is computed on the frames that are skipped over.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from torchrl._keys import OBSERVATION
from torchrl._types import NestedKey
from torchrl.envs.transforms._utils import get, key_list, set_, shallow_copy
from torchrl.envs.transforms.frames import FrameSkipTransform

__all__ = ["MaxPoolFrameSkip"]


class MaxPoolFrameSkip(FrameSkipTransform):
    """Repeats each action ``frame_skip`` times, sums the rewards and max-pools the last frames.

    After the repeats, each entry of ``in_keys`` holds the element-wise max of its values at the
    last ``pool`` base steps (fewer when the episode ended earlier in the repeats). Rewards are
    summed over the repeats, which stop at the first done. The reset frame is passed unchanged.
    Put it in each single env (a batched env cannot repeat its sub-envs' actions separately),
    after :class:`~torchrl.envs.transforms.NoopResetEnv` so that no-op steps are single frames.

    Args:
        frame_skip: how many base steps one step makes.
        in_keys: the entries to max-pool (default ``["observation"]``).
        pool: how many of the last frames the max is taken over (``1``: the last frame only).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import StepCounter, TransformedEnv
        >>> from torchrl.envs.transforms.atari import MaxPoolFrameSkip
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(MaxPoolFrameSkip(4, in_keys=["th"]))  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.rollout(2)["next", "step_count"].squeeze(-1)
        tensor([4, 8])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        frame_skip: int = 4,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        pool: int = 2,
    ) -> None:
        super().__init__(frame_skip)
        if int(pool) < 1 or int(pool) > self.frame_skip:
            raise ValueError(
                f"MaxPoolFrameSkip: pool must be in [1, frame_skip={self.frame_skip}], got {pool}"
            )
        self.pool = int(pool)
        self.pool_keys = key_list([OBSERVATION] if in_keys is None else in_keys, "in_keys")

    def _frames(self, next_tensordict: TensorDictBase) -> list[torch.Tensor]:
        frames = []
        for key in self.pool_keys:
            frame = get(next_tensordict, key)
            if frame is None:
                raise KeyError(
                    f"MaxPoolFrameSkip: the entry {key!r} to max-pool is missing from the step "
                    f"output (keys: {list(next_tensordict.keys(True, True))})"
                )
            frames.append(frame)
        return frames

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.frame_skip == 1:
            return next_tensordict
        parent = self.parent
        if parent is None:
            raise RuntimeError("MaxPoolFrameSkip must be used in a TransformedEnv")
        cache = parent._cache or parent._spec_cache()
        groups = cache.done_groups
        reward_keys = cache.reward_keys
        rewards = [get(next_tensordict, k) for k in reward_keys]
        # the frames of the last `pool` base steps, oldest first
        history = [self._frames(next_tensordict)]
        td_in = self._input_at_level(tensordict)
        for _ in range(self.frame_skip - 1):
            if groups.any_done(next_tensordict):
                break
            td_in = shallow_copy(td_in)
            td_in.update(next_tensordict)
            next_tensordict = parent._step(td_in)
            groups.complete(next_tensordict)
            rewards = [r + get(next_tensordict, k) for r, k in zip(rewards, reward_keys)]
            history.append(self._frames(next_tensordict))
            if len(history) > self.pool:
                del history[0]
        for key, reward in zip(reward_keys, rewards):
            set_(next_tensordict, key, reward)
        if len(history) > 1:
            for i, key in enumerate(self.pool_keys):
                pooled = history[0][i]
                for frames in history[1:]:
                    pooled = torch.maximum(pooled, frames[i])
                set_(next_tensordict, key, pooled)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("MaxPoolFrameSkip repeats env steps; use it in a TransformedEnv")

    def extra_repr(self) -> str:
        return f"frame_skip={self.frame_skip}, pool={self.pool}, in_keys={self.pool_keys}"
