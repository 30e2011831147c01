"""Multi-objective gymnasium envs (``mo-gymnasium``): :class:`MOGymWrapper` and :class:`MOGymEnv`.

An MO-Gymnasium env returns a vector reward, one entry per objective (its ``reward_space``, on
the unwrapped env). The wrappers are :class:`~torchrl.envs.GymWrapper` with one change: the
reward is float32 ``[*batch, n_objectives]`` (not ``[*batch, 1]``), and its spec says so.
Observations, actions, pixels, ``frame_skip`` (the reward vectors are summed) and seeding are
the gym wrapper's. Scalarize the reward with a transform or in the loss, as the algorithm needs.

Only single envs are wrapped: gymnasium's vector envs store scalar rewards, and MO-Gymnasium's
own vector env cannot disable autoreset; batch copies with :class:`~torchrl.envs.SerialEnv` or
:class:`~torchrl.envs.ParallelEnv`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION, DONE, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import import_gymnasium, raise_if_bad_action
from torchrl.envs.libs.gym import ClassProperty, GymWrapper

__all__ = ["MOGymEnv", "MOGymWrapper"]

_has_mo_gym = has_module("mo_gymnasium")


def _mo_gymnasium() -> Any:
    return import_optional("mo_gymnasium", extra="mo_gym")


def _available_envs(cls: type) -> list[str]:
    """The ids that MO-Gymnasium registers with gymnasium, sorted."""
    _mo_gymnasium()  # registers its envs
    registry = import_gymnasium().envs.registry
    return sorted(
        env_id
        for env_id, spec in registry.items()
        if str(spec.entry_point).startswith("mo_gymnasium")
    )


def reward_dim_of(env: Any) -> int:
    """The number of objectives of an MO-Gymnasium env (the size of its ``reward_space``).

    Args:
        env: a (possibly wrapped) gymnasium env whose unwrapped env has a ``reward_space``.

    Returns:
        The number of reward entries per step.

    Examples:
        >>> import mo_gymnasium
        >>> from torchrl.envs.libs.mo_gym import reward_dim_of
        >>> reward_dim_of(mo_gymnasium.make("deep-sea-treasure-v0"))
        2
    """
    space = getattr(getattr(env, "unwrapped", env), "reward_space", None)
    shape = getattr(space, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(
            f"MOGymWrapper: the env {env} has no one-dimensional reward_space (found "
            f"{space!r}); it is not a multi-objective env: use GymWrapper"
        )
    return int(shape[0])


class MOGymWrapper(GymWrapper):
    """Wraps an MO-Gymnasium env: a :class:`~torchrl.envs.GymWrapper` with vector rewards.

    The reward is float32 ``[n_objectives]`` (``reward_spec.shape[-1]`` is the number of
    objectives, read from the env's ``reward_space``); everything else is as in
    :class:`~torchrl.envs.GymWrapper`.

    Args:
        env: a single ``gymnasium.Env`` built by ``mo_gymnasium.make`` (vector envs are refused).
        categorical_action_encoding: see :class:`~torchrl.envs.GymWrapper`.
        from_pixels: see :class:`~torchrl.envs.GymWrapper`.
        pixels_only: see :class:`~torchrl.envs.GymWrapper`.
        frame_skip: repeat each action this many times, summing the reward vectors.
        device: see :class:`~torchrl.envs.GymWrapper`.
        batch_size: must be ``[]`` when given.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.

    Examples:
        >>> import mo_gymnasium
        >>> from torchrl.envs.libs.mo_gym import MOGymWrapper
        >>> env = MOGymWrapper(mo_gymnasium.make("deep-sea-treasure-v0"))
        >>> env.reward_spec.shape
        torch.Size([2])
        >>> env.set_seed(0) and None
        >>> env.rollout(3, break_when_any_done=False)["next", "reward"].shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        *,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        gym = import_gymnasium()
        if isinstance(env, gym.vector.VectorEnv):
            raise NotImplementedError(
                f"MOGymWrapper: vector envs are not supported ({type(env).__name__}: gymnasium's "
                "store scalar rewards, MO-Gymnasium's cannot disable autoreset); wrap single "
                "envs and batch them with SerialEnv/ParallelEnv"
            )
        self._reward_dim = reward_dim_of(env)
        super().__init__(
            env,
            categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )

    @property
    def reward_dim(self) -> int:
        """The number of objectives (the last dim of the reward)."""
        return self._reward_dim

    def _make_specs(self, observation_space: Any, action_space: Any) -> None:
        super()._make_specs(observation_space, action_space)
        self.reward_spec = Unbounded(
            shape=(*self.batch_size, self._reward_dim), device=self.device, dtype=torch.float32
        )

    def _make_action_check(self, action_keys: list[Any]) -> Callable[[TensorDictBase], None] | None:
        # the gym wrapper's fused check-and-convert lives in its _step; this _step converts
        # plainly, so actions get the generic check of EnvBase.step
        self._checked_write = None
        return EnvBase._make_action_check(self, action_keys)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(ACTION)
        step = self._env.step
        try:
            gym_action = self._write_action(action)
            obs, reward, terminated, truncated, info = step(gym_action)
        except (TypeError, ValueError, AttributeError, IndexError, AssertionError) as err:
            raise_if_bad_action(self, action, self.batch_size, err)
            raise
        total = np.asarray(reward, dtype=np.float64).reshape(self._reward_dim).copy()
        for _ in range(self._frame_skip - 1):
            if terminated or truncated:
                break
            obs, reward, terminated, truncated, info = step(gym_action)
            total += np.asarray(reward, dtype=np.float64).reshape(self._reward_dim)
        data = self._read_obs(obs)
        data[REWARD] = torch.from_numpy(total.astype(np.float32))
        # one array, three 1-element views: cheaper than three arrays
        flags = np.array([terminated, truncated, terminated or truncated], dtype=bool)
        data[TERMINATED] = torch.from_numpy(flags[0:1])
        data[TRUNCATED] = torch.from_numpy(flags[1:2])
        data[DONE] = torch.from_numpy(flags[2:3])
        return self._output(data, info)


class MOGymEnv(MOGymWrapper):
    """Builds an MO-Gymnasium env by id (``mo_gymnasium.make``) and wraps it.

    Keyword arguments that are not the wrapper's go to ``mo_gymnasium.make`` (e.g.
    ``max_episode_steps``). ``MOGymEnv.available_envs`` lists the ids MO-Gymnasium registers.

    Args:
        env_name: the id, e.g. ``"deep-sea-treasure-v0"`` or ``"mo-mountaincar-v0"``.
        categorical_action_encoding: see :class:`~torchrl.envs.GymWrapper`.
        from_pixels: see :class:`~torchrl.envs.GymWrapper`; ``render_mode="rgb_array"`` is passed.
        pixels_only: see :class:`~torchrl.envs.GymWrapper`.
        frame_skip: see :class:`MOGymWrapper`.
        device: see :class:`~torchrl.envs.GymWrapper`.
        batch_size: see :class:`MOGymWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.
        **kwargs: passed to ``mo_gymnasium.make``.

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> from torchrl.envs.libs.mo_gym import MOGymEnv
        >>> env = MOGymEnv("mo-mountaincar-v0", categorical_action_encoding=True)
        >>> check_env_specs(env)
        >>> env.reward_dim, "minecart-v0" in MOGymEnv.available_envs
        (3, True)
    """

    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        env_name: str,
        *,
        categorical_action_encoding: bool = False,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        mo_gymnasium = _mo_gymnasium()
        if kwargs.get("num_envs"):
            raise NotImplementedError(
                f"MOGymEnv: num_envs={kwargs['num_envs']} is not supported (see MOGymWrapper); "
                "batch copies with SerialEnv/ParallelEnv"
            )
        kwargs.pop("num_envs", None)
        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        env = mo_gymnasium.make(env_name, **kwargs)
        super().__init__(
            env,
            categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
