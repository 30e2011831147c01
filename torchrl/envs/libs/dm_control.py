"""DeepMind Control Suite environments behind the torchrl env contract.

A dm_control env returns a ``TimeStep`` whose observation is an ordered dict of numpy arrays; each
entry becomes a torchrl entry of the same name and dtype (float64 stays float64; scalars get a
trailing dim of 1). The action keeps the env's dtype and bounds. dm_control ends an episode with
``step_type == LAST``: a discount of 0 marks a termination, any other discount a time-limit
truncation. Pixels come from ``physics.render`` (headless through EGL, see
:func:`_dm_control`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, NEXT, PIXELS, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import torch_dtype_of

__all__ = ["DMControlEnv", "DMControlWrapper"]

_has_dm_control = has_module("dm_control")

PHYSICS = "physics"
_RESERVED = frozenset({ACTION, REWARD, DONE, TERMINATED, TRUNCATED, RESET, NEXT, PIXELS, PHYSICS})


def _dm_control() -> Any:
    """Imports dm_control; on Linux, picks headless EGL rendering unless ``MUJOCO_GL`` is set.

    MuJoCo reads ``MUJOCO_GL`` once, when dm_control is first imported: without it, dm_control
    tries GLFW, which needs a display.
    """
    if sys.platform.startswith("linux") and "dm_control" not in sys.modules:
        os.environ.setdefault("MUJOCO_GL", "egl")
    import_optional("mujoco", extra="dm_control")
    return import_optional("dm_control.suite", extra="dm_control")


def _array_spec_to_spec(array_spec: Any, device: torch.device | None) -> TensorSpec:
    """Maps a ``dm_env.specs.Array``/``BoundedArray`` to a leaf spec (scalars get shape ``(1,)``)."""
    shape = tuple(array_spec.shape) or (1,)
    dtype = torch_dtype_of(array_spec.dtype)
    minimum = getattr(array_spec, "minimum", None)
    maximum = getattr(array_spec, "maximum", None)
    if minimum is None or maximum is None:
        return Unbounded(shape=shape, dtype=dtype, device=device)
    low = torch.tensor(np.broadcast_to(minimum, array_spec.shape)).to(dtype).reshape(shape)
    high = torch.tensor(np.broadcast_to(maximum, array_spec.shape)).to(dtype).reshape(shape)
    return Bounded(low=low, high=high, shape=shape, dtype=dtype, device=device)


class DMControlWrapper(EnvBase):
    """Wraps a dm_control env (``dm_control.suite.load(...)``) behind the torchrl env contract.

    Observation entries keep their dm_control names and dtypes (``"position"``, ``"velocity"``,
    ... float64); the action is ``"action"`` (the env's dtype and bounds); the reward is float64
    ``[1]``. The physics state (``physics.get_state()``) is read with :meth:`get_physics_state`,
    written with :meth:`set_physics_state`, and with ``return_physics=True`` comes out at every
    step under ``"physics"``. ``set_seed`` reseeds the task's random state (the next reset uses
    it).

    Args:
        env: a dm_control ``control.Environment``.
        from_pixels: add rendered frames under ``"pixels"`` (uint8 ``[H, W, 3]``).
        pixels_only: with ``from_pixels``, drop the other observations.
        frame_skip: repeat each action this many times (summing rewards, stopping at the end of
            an episode).
        device: the device of the output tensors.
        render_kwargs: passed to ``physics.render`` (default ``{"camera_id": 0, "height": 84,
            "width": 84}``).
        return_physics: add the physics state (float64 ``[n]``) under ``"physics"``.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> from dm_control import suite
        >>> from torchrl.envs.libs.dm_control import DMControlWrapper
        >>> env = DMControlWrapper(suite.load("cartpole", "balance", task_kwargs={"random": 0}))
        >>> td = env.rollout(3)
        >>> td["next", "position"].dtype, td["next", "reward"].shape
        (torch.float64, torch.Size([3, 1]))
    """

    def __init__(
        self,
        env: Any = None,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        render_kwargs: dict[str, Any] | None = None,
        return_physics: bool = False,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        _dm_control()
        from dm_control.rl.control import Environment

        if not isinstance(env, Environment):
            raise TypeError(
                f"DMControlWrapper needs a dm_control control.Environment (suite.load(...)), got "
                f"{type(env).__name__}"
            )
        frame_skip = 1 if frame_skip is None else int(frame_skip)
        if frame_skip < 1:
            raise ValueError(f"DMControlWrapper: frame_skip must be >= 1, got {frame_skip}")
        if pixels_only and not from_pixels:
            raise ValueError("DMControlWrapper: pixels_only=True needs from_pixels=True")
        super().__init__(
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self._from_pixels = bool(from_pixels)
        self._pixels_only = bool(pixels_only)
        self._frame_skip = frame_skip
        self._return_physics = bool(return_physics)
        self.render_kwargs = {"camera_id": 0, "height": 84, "width": 84, **(render_kwargs or {})}
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped dm_control environment."""
        return self._env

    @property
    def physics(self) -> Any:
        """The env's MuJoCo ``Physics`` (for rendering, model and data access)."""
        return self._env.physics

    @property
    def frame_skip(self) -> int:
        """How many times each action is repeated."""
        return self._frame_skip

    def get_physics_state(self) -> torch.Tensor:
        """Returns the physics state (``physics.get_state()``), float64 ``[n]``."""
        return torch.from_numpy(self._env.physics.get_state().copy())

    def set_physics_state(self, state: torch.Tensor) -> None:
        """Writes a state read by :meth:`get_physics_state` back into the simulator.

        Args:
            state: float64 ``[n]``.
        """
        physics = self._env.physics
        with physics.reset_context():
            physics.set_state(np.asarray(state.detach().cpu().numpy(), dtype=np.float64))

    # ------------------------------------------------------------------------------------ specs
    def _make_specs(self) -> None:
        env, device = self._env, self.device
        entries: dict[Any, Any] = {}
        self._obs_shapes: list[tuple[str, tuple[int, ...], np.dtype]] = []
        if not self._pixels_only:
            for key, array_spec in env.observation_spec().items():
                if key in _RESERVED:
                    raise ValueError(
                        f"DMControlWrapper: the observation {key!r} clashes with a reserved key"
                    )
                spec = _array_spec_to_spec(array_spec, device)
                # observations are read as unbounded values: dm_control declares them so
                entries[key] = Unbounded(shape=spec.shape, dtype=spec.dtype, device=device)
                self._obs_shapes.append((key, tuple(spec.shape), np.dtype(array_spec.dtype)))
        if self._from_pixels:
            frame = self._render()
            entries[PIXELS] = Bounded(0, 255, shape=frame.shape, dtype=torch.uint8, device=device)
        if self._return_physics:
            n = self._env.physics.get_state().shape[0]
            entries[PHYSICS] = Unbounded(shape=(n,), dtype=torch.float64, device=device)
        self.observation_spec = Composite(entries, device=device)
        self.action_spec = _array_spec_to_spec(env.action_spec(), device)
        self._action_dtype = np.dtype(env.action_spec().dtype)
        reward = env.reward_spec()
        self.reward_spec = Unbounded(shape=(1,), dtype=torch_dtype_of(reward.dtype), device=device)
        self._reward_dtype = np.dtype(reward.dtype)

    # ---------------------------------------------------------------------------------- running
    def _render(self) -> torch.Tensor:
        frame = self._env.physics.render(**self.render_kwargs)
        return torch.from_numpy(np.ascontiguousarray(frame, dtype=np.uint8))

    def _output(self, time_step: Any, reward: float | None) -> TensorDictBase:
        data: dict[Any, Any] = {}
        observation = time_step.observation
        for key, shape, dtype in self._obs_shapes:
            # copies: some tasks hand out views of the simulator's buffers
            data[key] = torch.from_numpy(np.array(observation[key], dtype=dtype).reshape(shape))
        if self._from_pixels:
            data[PIXELS] = self._render()
        if self._return_physics:
            data[PHYSICS] = self.get_physics_state()
        last = time_step.last()
        terminated = bool(last and time_step.discount == 0)
        flags = np.array([terminated, last and not terminated, last], dtype=bool)
        data[TERMINATED] = torch.from_numpy(flags[0:1])
        data[TRUNCATED] = torch.from_numpy(flags[1:2])
        data[DONE] = torch.from_numpy(flags[2:3])
        if reward is not None:
            data[REWARD] = torch.from_numpy(np.array([reward], dtype=self._reward_dtype))
        device = self.device
        if device is None or device.type == "cpu":
            return new_unchecked(data, batch_size=self.batch_size, device=device)
        return TensorDict(data, batch_size=self.batch_size, device=device)

    def _set_seed(self, seed: int | None) -> None:
        # reseeding in place keeps the generator the task holds (a new one would not be seen)
        self._env.task.random.seed(seed)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        return self._output(self._env.reset(), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(ACTION).detach().cpu().numpy().astype(self._action_dtype)
        step = self._env.step
        time_step = step(action)
        reward = time_step.reward or 0.0
        for _ in range(self._frame_skip - 1):
            if time_step.last():
                break
            time_step = step(action)
            reward += time_step.reward or 0.0
        return self._output(time_step, reward)

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        task = type(self._env.task).__name__
        return (
            f"{type(self).__name__}(task={task}, from_pixels={self._from_pixels}, "
            f"device={self.device})"
        )


class DMControlEnv(DMControlWrapper):
    """Builds a dm_control suite task (``suite.load(env_name, task_name)``) and wraps it.

    See :class:`DMControlWrapper` for the data layout. ``DMControlEnv.available_envs`` lists the
    suite's ``(domain, task)`` pairs.

    Args:
        env_name: the domain, e.g. ``"cheetah"``.
        task_name: the task, e.g. ``"run"``.
        from_pixels: see :class:`DMControlWrapper`.
        pixels_only: see :class:`DMControlWrapper`.
        frame_skip: see :class:`DMControlWrapper`.
        device: see :class:`DMControlWrapper`.
        seed: the task's seed (``task_kwargs={"random": seed}``).
        task_kwargs: passed to ``suite.load`` (e.g. ``{"time_limit": 10}``).
        environment_kwargs: passed to ``suite.load``.
        render_kwargs: see :class:`DMControlWrapper`.
        return_physics: see :class:`DMControlWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> from torchrl.envs.libs.dm_control import DMControlEnv
        >>> env = DMControlEnv("cheetah", "run", seed=0)
        >>> check_env_specs(env)
        >>> sorted(env.observation_spec.keys()), env.action_spec.shape
        (['position', 'velocity'], torch.Size([6]))
    """

    def __init__(
        self,
        env_name: str,
        task_name: str,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        seed: int | None = None,
        task_kwargs: dict[str, Any] | None = None,
        environment_kwargs: dict[str, Any] | None = None,
        render_kwargs: dict[str, Any] | None = None,
        return_physics: bool = False,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        suite = _dm_control()
        if (env_name, task_name) not in suite.ALL_TASKS:
            domains = sorted({d for d, _ in suite.ALL_TASKS})
            tasks = sorted(t for d, t in suite.ALL_TASKS if d == env_name)
            hint = f"tasks of {env_name!r}: {tasks}" if tasks else f"domains: {domains}"
            raise ValueError(f"DMControlEnv: unknown task ({env_name!r}, {task_name!r}); {hint}")
        task_kwargs = dict(task_kwargs or {})
        if seed is not None:
            task_kwargs["random"] = seed
        env = suite.load(
            env_name, task_name, task_kwargs=task_kwargs, environment_kwargs=environment_kwargs
        )
        super().__init__(
            env,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            render_kwargs=render_kwargs,
            return_physics=return_physics,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
        self.task_name = task_name

    @classmethod
    def available_envs(cls) -> list[tuple[str, str]]:
        """The suite's ``(domain, task)`` pairs.

        Examples:
            >>> from torchrl.envs.libs.dm_control import DMControlEnv
            >>> ("cheetah", "run") in DMControlEnv.available_envs()
            True
        """
        return list(_dm_control().ALL_TASKS)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.env_name}, task={self.task_name}, "
            f"from_pixels={self._from_pixels}, device={self.device})"
        )
