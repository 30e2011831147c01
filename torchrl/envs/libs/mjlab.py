"""mjlab (MuJoCo Warp, torch-native) environments behind the torchrl env contract.

An mjlab ``ManagerBasedRlEnv`` simulates ``num_envs`` worlds on one device and speaks torch:
``reset(env_ids=...) -> (obs, extras)``, ``step(action) -> (obs, reward, terminated, truncated,
extras)``, with ``obs`` a dict of observation groups (``"actor"``, ``"critic"``, ...). The wrapper
turns mjlab's own auto-reset off (``cfg.auto_reset = False``), so a step returns the terminal
observation and torchrl's ``"_reset"`` mask resets exactly the finished worlds
(``env.reset(env_ids=...)``).

mjlab 1.6 pins ``mujoco~=3.11``: it installs in its own venv, not beside ``torchrl[mujoco]``
(see ``docs/simulators.rst``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Composite, Unbounded
from torchrl.envs.batched import ParallelEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["MJLabEnv", "MJLabWrapper"]

_has_mjlab = has_module("mjlab")

_RESERVED = {ACTION, REWARD, DONE, TERMINATED, TRUNCATED, "next", "_reset", "_step"}


def _mjlab() -> Any:
    return import_optional("mjlab", extra="mjlab")


def _group_spec(space: Any, batch: torch.Size, device: DeviceLike) -> Any:
    """The spec of one observation group: a Box is a float32 leaf, a Dict a nested Composite."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        out = Composite(shape=batch, device=device)
        for name, sub in spaces.items():
            out[name] = _group_spec(sub, batch, device)
        return out
    return Unbounded(shape=(*batch, *space.shape), dtype=torch.float32, device=device)


class MJLabWrapper(EnvBase):
    """Wraps a built mjlab ``ManagerBasedRlEnv`` behind the torchrl env contract.

    Entries: one root entry per observation group (``"actor"``, ``"critic"``, nested when the
    group keeps its terms apart), ``"action"`` (unbounded float32 ``[num_envs, action_dim]``, as
    mjlab declares it), ``"reward"`` ``[num_envs, 1]``, ``done``/``terminated``/``truncated``
    (mjlab's time-outs are ``truncated``). Resets go through ``"_reset"``:
    mjlab's auto-reset is switched off on the wrapped env.

    Args:
        env: a ``mjlab.envs.ManagerBasedRlEnv``.
        device: the tensors' device; must be the simulation's (default: ``env.device``).
        batch_size: ``[env.num_envs]`` (the default); other shapes raise.
        native_autoreset: only ``False`` (torchrl drives the resets) is supported.
        from_pixels: not supported (``True`` raises).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.

    Examples:
        >>> from mjlab.envs import ManagerBasedRlEnv  # doctest: +SKIP
        >>> from mjlab.tasks.registry import load_env_cfg  # doctest: +SKIP
        >>> from torchrl.envs.libs.mjlab import MJLabWrapper
        >>> cfg = load_env_cfg("Mjlab-Cartpole-Balance")  # doctest: +SKIP
        >>> cfg.scene.num_envs = 4  # doctest: +SKIP
        >>> env = MJLabWrapper(ManagerBasedRlEnv(cfg, device="cpu"))  # doctest: +SKIP
        >>> env.rollout(3)["next", "actor"].shape  # doctest: +SKIP
        torch.Size([4, 3, 5])
    """

    _handles_partial_reset = True

    def __init__(
        self,
        env: Any = None,
        *,
        device: DeviceLike = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        native_autoreset: bool = False,
        from_pixels: bool = False,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        _mjlab()
        envs = import_optional("mjlab.envs", extra="mjlab")
        if not isinstance(env, envs.ManagerBasedRlEnv):
            raise TypeError(
                f"{type(self).__name__}: env must be a mjlab ManagerBasedRlEnv, got "
                f"{type(env).__name__}"
            )
        if native_autoreset:
            raise NotImplementedError(
                f"{type(self).__name__}: native_autoreset=True is not supported; torchrl drives "
                "the resets through '_reset' (mjlab's auto_reset is switched off)"
            )
        if from_pixels:
            raise NotImplementedError(f"{type(self).__name__}: from_pixels=True is not supported")
        sim_device = torch.device(env.device)
        device = sim_device if device is None else torch.device(device)
        if device != sim_device:
            raise ValueError(
                f"{type(self).__name__}: device={device} differs from the simulation's "
                f"({sim_device}); build the mjlab env on the device you want"
            )
        batch = torch.Size([env.num_envs]) if batch_size is None else torch.Size(batch_size)
        if batch != torch.Size([env.num_envs]):
            raise ValueError(
                f"{type(self).__name__}: batch_size must be [num_envs] = [{env.num_envs}], got "
                f"{list(batch)}"
            )
        super().__init__(
            device=device,
            batch_size=batch,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        env.cfg.auto_reset = False
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped mjlab env."""
        return self._env

    def _make_specs(self) -> None:
        env, batch, device = self._env, self.batch_size, self.device
        obs = Composite(shape=batch, device=device)
        for group, space in env.single_observation_space.spaces.items():
            if group in _RESERVED:
                raise ValueError(
                    f"{type(self).__name__}: the observation group {group!r} collides with a "
                    f"reserved torchrl key ({sorted(_RESERVED)})"
                )
            obs[group] = _group_spec(space, batch, device)
        self.observation_spec = obs
        self.action_spec = Unbounded(
            shape=(*batch, *env.single_action_space.shape), dtype=torch.float32, device=device
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)

    def _observations(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {group: obs[group] for group in self.observation_spec.keys() if group in obs}

    def _set_seed(self, seed: int | None) -> None:
        self._env.seed(int(seed if seed is not None else -1))

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        env_ids = None
        if mask is not None and not bool(mask.all()):
            env_ids = mask.reshape(-1).nonzero().squeeze(-1).to(self.device)
        obs, _ = self._env.reset(env_ids=env_ids)
        shape = (*self.batch_size, 1)
        false = torch.zeros(shape, dtype=torch.bool, device=self.device)
        data = {**self._observations(obs), DONE: false, TERMINATED: false, TRUNCATED: false.clone()}
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs, reward, terminated, truncated, _ = self._env.step(tensordict.get(ACTION))
        shape = (*self.batch_size, 1)
        terminated = terminated.reshape(shape).bool()
        truncated = truncated.reshape(shape).bool() & ~terminated
        data = {
            **self._observations(obs),
            REWARD: reward.reshape(shape).to(torch.float32),
            DONE: terminated | truncated,
            TERMINATED: terminated,
            TRUNCATED: truncated,
        }
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def close(self) -> None:
        """Closes the mjlab env; calling it again does nothing."""
        if not getattr(self, "_closed", False):
            self._closed = True
            self._env.close()

    def __repr__(self) -> str:
        name = getattr(self, "task_id", None) or type(self._env).__name__
        return (
            f"{type(self).__name__}(env={name}, batch_size={self.batch_size}, device={self.device})"
        )


def _available_envs(cls: type) -> list[str]:
    """The task ids of mjlab's registry."""
    return list(import_optional("mjlab.tasks.registry", extra="mjlab").list_tasks())


class MJLabEnv(MJLabWrapper):
    """Builds an mjlab task from its registry (``load_env_cfg``) and wraps it.

    See :class:`MJLabWrapper`. ``MJLabEnv.available_envs`` lists the task ids.

    Args:
        task_id: an mjlab task id, e.g. ``"Mjlab-Cartpole-Balance"``.
        cfg: a ``ManagerBasedRlEnvCfg`` to use instead of the registry's (copied first).
        play: load the task's play/evaluation config.
        num_envs: the number of worlds (overrides ``cfg.scene.num_envs``).
        device: the simulation device (default: ``"cuda:0"`` when CUDA is available, else CPU).
        batch_size: ``[num_envs]``; sets ``num_envs`` when that is omitted.
        num_workers: more than 1 returns a :class:`~torchrl.envs.ParallelEnv` of that many
            copies instead.
        **kwargs: the other keyword arguments of :class:`MJLabWrapper`.

    Examples:
        >>> from torchrl.envs.libs.mjlab import MJLabEnv
        >>> env = MJLabEnv("Mjlab-Cartpole-Balance", num_envs=4, device="cpu")  # doctest: +SKIP
        >>> env.rollout(2)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 2, 1])
    """

    available_envs = ClassProperty(_available_envs)

    def __new__(cls, *args: Any, num_workers: int | None = None, **kwargs: Any) -> Any:
        # a plain __new__: num_workers > 1 builds the ParallelEnv of single copies instead
        if num_workers is not None and int(num_workers) > 1:
            return ParallelEnv(int(num_workers), functools.partial(cls, *args, **kwargs))
        return super().__new__(cls)

    def __init__(
        self,
        task_id: str,
        cfg: Any = None,
        play: bool = False,
        *,
        num_envs: int | None = None,
        device: DeviceLike = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        num_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        registry = import_optional("mjlab.tasks.registry", extra="mjlab")
        envs = import_optional("mjlab.envs", extra="mjlab")
        if cfg is None:
            if task_id not in registry.list_tasks():
                raise ValueError(
                    f"MJLabEnv: mjlab has no task {task_id!r}; registered: {registry.list_tasks()}"
                )
            cfg = registry.load_env_cfg(task_id, play=play)
        cfg = copy.deepcopy(cfg)
        if num_envs is None and batch_size is not None:
            num_envs = int(torch.Size(batch_size).numel())
        if num_envs is not None:
            cfg.scene.num_envs = int(num_envs)
        if device is None:
            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        env = envs.ManagerBasedRlEnv(cfg, device=str(torch.device(device)))
        self.task_id = task_id
        super().__init__(env, device=device, batch_size=batch_size, **kwargs)
