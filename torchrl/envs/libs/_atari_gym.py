"""The per-game Atari preprocessing that runs inside gymnasium, in numpy (imported lazily).

:func:`~torchrl.envs.libs.atari.atari_game_env` wraps each ALE game in :class:`AtariSkipPool`
before :class:`~torchrl.envs.libs.gym.GymWrapper` sees it: the no-op starts, the repeated,
max-pooled frames of a step and the resize to ``screen_size`` then cost a few calls on the
emulator and numpy/OpenCV calls on preallocated arrays instead of one TensorDict step per
emulator frame. The transforms :class:`~torchrl.envs.transforms.NoopResetEnv`,
:class:`~torchrl.envs.transforms.atari.MaxPoolFrameSkip` and
:class:`~torchrl.envs.transforms.Resize` do the same for any env.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from torchrl._utils import import_optional

__all__ = ["AtariSkipPool"]

# gymnasium.make's own wrappers around an ALE env: they check the calls (reset before step, the
# first outputs) and change nothing, so the emulator can be driven below them
_PASSIVE_WRAPPERS = ("OrderEnforcing", "PassiveEnvChecker")


class AtariSkipPool(gymnasium.Wrapper):
    """No-op starts, then each action repeated ``frame_skip`` times with the last frames max-pooled.

    A reset is followed by a number of NOOP frames drawn uniformly from ``[0, noop_max]`` with
    the env's own generator (seeded by ``reset(seed=...)``); an episode that ends during them is
    reset again. A step repeats the action ``frame_skip`` times (fewer when the episode ends),
    sums the rewards and returns the element-wise max of the last ``pool`` frames it saw (fewer
    when the episode ended earlier), resized to ``screen_size`` x ``screen_size`` with OpenCV's
    area interpolation when ``screen_size`` is given (what gymnasium's ``AtariPreprocessing``
    does). The frames are read from the emulator (``env.unwrapped.ale``) into preallocated
    arrays, below gymnasium's passive checking wrappers; the wrapped env must run with
    ``frameskip=1`` and discrete actions. The info holds ``"lives"``; with ``lives=True`` the observation is a dict
    of the screen (``"observation"``) and the lives left (``"lives"``, int64 ``[1]``).

    Args:
        env: a gymnasium ALE env (``gymnasium.make("ALE/...", frameskip=1)``), RGB or grey.
        frame_skip: emulator frames per step.
        pool: how many of the last frames are max-pooled (``1``: the last frame only).
        noop_max: the largest number of no-op frames after a reset (``0``: none).
        screen_size: the side of the square output frames (``None``: the full screen).
        lives: add the lives to the observation.

    Raises:
        ValueError: for sizes out of range, an env wrapped in more than gymnasium's passive
            checks (their steps would be bypassed), or one that skips frames itself or takes
            continuous actions.
    """

    def __init__(
        self,
        env: Any,
        frame_skip: int,
        pool: int,
        noop_max: int,
        screen_size: int | None = None,
        lives: bool = False,
    ) -> None:
        super().__init__(env)
        if int(frame_skip) < 1:
            raise ValueError(f"AtariSkipPool: frame_skip must be >= 1, got {frame_skip}")
        if not 1 <= int(pool) <= int(frame_skip):
            raise ValueError(
                f"AtariSkipPool: pool must be in [1, frame_skip={frame_skip}], got {pool}"
            )
        if int(noop_max) < 0:
            raise ValueError(f"AtariSkipPool: noop_max must be >= 0, got {noop_max}")
        if screen_size is not None and int(screen_size) < 1:
            raise ValueError(f"AtariSkipPool: screen_size must be >= 1, got {screen_size}")
        layer = env
        while isinstance(layer, gymnasium.Wrapper):
            if type(layer).__name__ not in _PASSIVE_WRAPPERS:
                raise ValueError(
                    f"AtariSkipPool drives the emulator below the env's wrappers: expected only "
                    f"{list(_PASSIVE_WRAPPERS)} around the ALE env, got {type(layer).__name__}"
                )
            layer = layer.env
        self.frame_skip = int(frame_skip)
        self.pool = int(pool)
        self.noop_max = int(noop_max)
        self.screen_size = None if screen_size is None else int(screen_size)
        game = env.unwrapped
        # ale_py keeps these as attributes of its AtariEnv (``_frameskip`` is private)
        if getattr(game, "_frameskip", 1) != 1 or getattr(game, "continuous", False):
            raise ValueError(
                f"AtariSkipPool: the ALE env must be made with frameskip=1 and discrete actions, "
                f"got frameskip={getattr(game, '_frameskip', 1)!r}, "
                f"continuous={getattr(game, 'continuous', False)!r}"
            )
        self._ale = game.ale
        self._actions = list(_action_set(game))
        space = env.observation_space
        shape = tuple(space.shape)
        if len(shape) == 3:
            self._grab = self._ale.getScreenRGB
        elif len(shape) == 2:
            self._grab = self._ale.getScreenGrayscale
        else:
            raise ValueError(
                f"AtariSkipPool: expected a grey [H, W] or RGB [H, W, 3] screen, got {shape}"
            )
        # the last `pool` frames, written in turn (slot = frame index % pool)
        self._frames = np.empty((self.pool, *shape), dtype=np.uint8)
        self._resize = None
        if self.screen_size is not None:
            cv2 = import_optional("cv2", extra="atari")
            size = (self.screen_size, self.screen_size)
            self._resize = lambda frame: cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
            shape = (self.screen_size, self.screen_size, *shape[2:])
        screen = gymnasium.spaces.Box(0, 255, shape, dtype=np.uint8)
        self.lives = bool(lives)
        if self.lives:
            count = gymnasium.spaces.Box(0, 255, (1,), dtype=np.int64)
            self.observation_space = gymnasium.spaces.Dict({"observation": screen, "lives": count})
        else:
            self.observation_space = screen

    def _output(self, frame: np.ndarray) -> tuple[Any, dict[str, Any]]:
        """The observation of ``frame`` (max-pooled, a new array) and the info."""
        screen = frame if self._resize is None else self._resize(frame)
        lives = self._ale.lives()
        if self.lives:
            return {"observation": screen, "lives": np.array([lives], dtype=np.int64)}, {
                "lives": lives
            }
        return screen, {"lives": lives}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, _ = self.env.reset(**kwargs)
        if self.noop_max:
            ale, noop = self._ale, self._actions[0]
            noops = int(self.np_random.integers(0, self.noop_max + 1))
            for _ in range(noops):
                ale.act(noop, 1.0)
                if ale.game_over(with_truncation=False) or ale.game_truncated():
                    self.env.reset()
            if noops:
                obs = self._grab()
        return self._output(obs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        ale, frames, pool, grab = self._ale, self._frames, self.pool, self._grab
        code = self._actions[action]
        total = 0.0
        seen = 0
        terminated = truncated = False
        # every frame is read (not only the last `pool`): an episode may end at any of them
        for seen in range(1, self.frame_skip + 1):
            total += ale.act(code, 1.0)
            grab(frames[(seen - 1) % pool])
            terminated = ale.game_over(with_truncation=False)
            truncated = ale.game_truncated()
            if terminated or truncated:
                break
        filled = min(seen, pool)
        if filled == 1:
            last = frames[(seen - 1) % pool]
            pooled = last if self._resize is not None else last.copy()
        elif filled == 2:
            pooled = np.maximum(frames[0], frames[1])
        else:
            pooled = frames[:filled].max(axis=0)
        obs, info = self._output(pooled)
        return obs, total, bool(terminated), bool(truncated), info


def _action_set(game: Any) -> list[Any]:
    """The ALE actions the game's action indices stand for."""
    actions = getattr(game, "_action_set", None)  # ale_py's AtariEnv keeps it there
    if actions is not None:
        return list(actions)
    ale = game.ale
    minimal = list(ale.getMinimalActionSet())
    n = int(game.action_space.n)
    return minimal if n == len(minimal) else list(ale.getLegalActionSet())
