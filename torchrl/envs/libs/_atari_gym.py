"""The per-game Atari preprocessing that runs inside gymnasium, in numpy (imported lazily).

:func:`~torchrl.envs.libs.atari.atari_game_env` wraps each ALE game in :class:`AtariSkipPool`
before :class:`~torchrl.envs.libs.gym.GymWrapper` sees it: the no-op starts and the repeated,
max-pooled frames of a step then cost numpy calls on the emulator's own arrays instead of one
TensorDict step per emulator frame. The transforms
:class:`~torchrl.envs.transforms.NoopResetEnv` and
:class:`~torchrl.envs.transforms.atari.MaxPoolFrameSkip` do the same for any env.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

__all__ = ["AtariSkipPool"]


class AtariSkipPool(gymnasium.Wrapper):
    """No-op starts, then each action repeated ``frame_skip`` times with the last frames max-pooled.

    A reset is followed by a number of NOOP steps (action ``0``) drawn uniformly from
    ``[0, noop_max]`` with the env's own generator (seeded by ``reset(seed=...)``); an episode
    that ends during them is reset again. A step repeats the action ``frame_skip`` times (fewer
    when the episode ends), sums the rewards and returns the element-wise max of the last
    ``pool`` frames it saw (fewer when the episode ended earlier). The wrapped env must run
    with ``frameskip=1``.

    Args:
        env: a gymnasium ALE env.
        frame_skip: emulator frames per step.
        pool: how many of the last frames are max-pooled (``1``: the last frame only).
        noop_max: the largest number of no-op frames after a reset (``0``: none).
    """

    def __init__(self, env: Any, frame_skip: int, pool: int, noop_max: int) -> None:
        super().__init__(env)
        if int(frame_skip) < 1:
            raise ValueError(f"AtariSkipPool: frame_skip must be >= 1, got {frame_skip}")
        if not 1 <= int(pool) <= int(frame_skip):
            raise ValueError(
                f"AtariSkipPool: pool must be in [1, frame_skip={frame_skip}], got {pool}"
            )
        if int(noop_max) < 0:
            raise ValueError(f"AtariSkipPool: noop_max must be >= 0, got {noop_max}")
        self.frame_skip = int(frame_skip)
        self.pool = int(pool)
        self.noop_max = int(noop_max)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if not self.noop_max:
            return obs, info
        for _ in range(int(self.np_random.integers(0, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        step = self.env.step
        total = 0.0
        recent: list[Any] = []  # the last `pool` frames (ALE hands out a new array per frame)
        for _ in range(self.frame_skip):
            obs, reward, terminated, truncated, info = step(action)
            total += float(reward)
            recent.append(obs)
            if len(recent) > self.pool:
                del recent[0]
            if terminated or truncated:
                break
        pooled = recent[0]
        for frame in recent[1:]:
            pooled = np.maximum(pooled, frame)
        return pooled, total, terminated, truncated, info
