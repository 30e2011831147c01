"""A base for MuJoCo task envs whose model is generated in Python (no asset files).

The locomotion base (:class:`~torchrl.envs.custom.mujoco.MujocoEnv`) loads gymnasium's model
files and computes the locomotion reward. The manipulation and attitude tasks of this folder
(:class:`~torchrl.envs.BallBowlEnv`, :class:`~torchrl.envs.SatelliteEnv`) build their MJCF as a
string instead (so nothing but Python files has to ship), observe several named entries, and
write their own reward, so they share this smaller base: one ``MjData`` per sub-env, stepped in
a loop, ``frame_skip`` physics steps per env step, and an optional step limit.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Binary, Bounded, Composite, Unbounded
from torchrl.envs.common import EnvBase

if TYPE_CHECKING:
    import mujoco

__all__ = ["MujocoSceneEnv", "import_mujoco", "sim_batch_size"]

_has_mujoco = importlib.util.find_spec("mujoco") is not None
_EXTRA = 'pip install "torchrl[mujoco]"'


def import_mujoco(owner: str) -> Any:
    """Imports ``mujoco``, or raises an ``ImportError`` naming the extra to install.

    Args:
        owner: the name of the env that needs it (for the message).

    Returns:
        The ``mujoco`` module.
    """
    if not _has_mujoco:
        raise ImportError(f"{owner} needs the mujoco package: {_EXTRA}")
    import mujoco

    return mujoco


def sim_batch_size(owner: str, num_envs: int | None, batch_size: ShapeLike | None) -> torch.Size:
    """The batch size of an env holding one MuJoCo simulation per sub-env: ``[]`` or ``[n]``.

    Args:
        owner: the env's name (for the messages).
        num_envs: how many simulations (``None``: from ``batch_size``).
        batch_size: ``None``, an int or a one-dim shape; not with ``num_envs``.

    Returns:
        ``torch.Size([])`` or ``torch.Size([n])``.

    Examples:
        >>> sim_batch_size("HopperEnv", 3, None)
        torch.Size([3])
    """
    if num_envs is not None and batch_size is not None:
        raise ValueError(f"{owner}: pass num_envs or batch_size, not both")
    if num_envs is not None:
        if int(num_envs) < 1:
            raise ValueError(f"{owner}: num_envs must be >= 1, got {num_envs}")
        batch_size = [int(num_envs)]
    if batch_size is None:
        batch = torch.Size([])
    elif isinstance(batch_size, int):
        batch = torch.Size([batch_size])
    else:
        batch = torch.Size(batch_size)
    if len(batch) > 1:
        raise ValueError(f"{owner}: batch_size must be [] or [n], got {list(batch)}")
    return batch


class MujocoSceneEnv(EnvBase):
    """Base of the MuJoCo task envs built from a generated MJCF string.

    A subclass passes its MJCF to ``__init__`` and writes :meth:`_observe` (a dict of named
    numpy arrays per sub-env; bool arrays become ``Binary`` specs, others float32),
    :meth:`_reward` and optionally :meth:`_terminated`, :meth:`_ctrl`, :meth:`_reset_one`.

    Args:
        xml: the MJCF model, as a string.
        num_envs: the number of simulations (batch ``[num_envs]``); ``None`` (default) gives one
            simulation with batch ``[]``.
        batch_size: an alternative to ``num_envs``: ``[]`` or ``[n]``.
        frame_skip: physics steps per env step.
        max_episode_steps: truncate episodes after this many steps (``None``: never).
        device: where the tensors live (the simulation runs on CPU).
        seed: the seed of the env's random draws.
        validate_actions: check the actions against the action spec.
    """

    _handles_partial_reset = True

    def __init__(
        self,
        xml: str,
        *,
        num_envs: int | None = None,
        batch_size: ShapeLike | None = None,
        frame_skip: int = 1,
        max_episode_steps: int | None = None,
        device: DeviceLike = None,
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        name = type(self).__name__
        batch = sim_batch_size(name, num_envs, batch_size)
        if int(frame_skip) < 1:
            raise ValueError(f"{name}: frame_skip must be >= 1, got {frame_skip}")
        if max_episode_steps is not None and int(max_episode_steps) < 1:
            raise ValueError(f"{name}: max_episode_steps must be >= 1, got {max_episode_steps}")
        self._mujoco = import_mujoco(name)
        super().__init__(device=device, batch_size=batch, validate_actions=validate_actions)
        self.model: mujoco.MjModel = self._mujoco.MjModel.from_xml_string(xml)
        self.frame_skip = int(frame_skip)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.num_envs = int(batch.numel())
        self.data: list[mujoco.MjData] = [
            self._mujoco.MjData(self.model) for _ in range(self.num_envs)
        ]
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)
        for data in self.data:
            self._mujoco.mj_forward(self.model, data)

    @property
    def dt(self) -> float:
        """Seconds of simulated time per env step (``timestep * frame_skip``)."""
        return float(self.model.opt.timestep) * self.frame_skip

    # ------------------------------------------------------------------------ what tasks write
    def _observe(self, index: int) -> dict[str, np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} must implement _observe(index)")

    def _reward(self, index: int, action: np.ndarray) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement _reward(index, action)")

    def _terminated(self, index: int) -> bool:
        return False

    def _ctrl(self, action: np.ndarray) -> np.ndarray:
        """The actuator controls for one sub-env's action (default: the action itself)."""
        return action

    def _reset_one(self, index: int, tensordict: TensorDictBase | None) -> None:
        """Sets sub-env ``index``'s state after ``mj_resetData`` (default: the model's)."""

    def _extra_reset_entries(self) -> dict[str, torch.Tensor]:
        """Entries (batch-shaped tensors) added to every reset output."""
        return {}

    # ----------------------------------------------------------------------------- spec helpers
    def _make_observation_spec(self) -> None:
        """Sets the observation spec from one observation of sub-env 0."""
        batch = self.batch_size
        specs: dict[NestedKey, Any] = {}
        for key, value in self._observe(0).items():
            shape = (*batch, *value.shape)
            if value.dtype == np.bool_:
                specs[key] = Binary(n=value.shape[-1], shape=shape, dtype=torch.bool)
            else:
                specs[key] = Unbounded(shape=shape, dtype=torch.float32)
        self.observation_spec = Composite(specs, shape=batch)

    def _actuator_action_spec(self, first: int = 0, last: int | None = None) -> Bounded:
        """A ``Bounded`` action spec from the control ranges of actuators ``first:last``."""
        ranges = np.asarray(self.model.actuator_ctrlrange[first:last], dtype=np.float32)
        low = torch.as_tensor(ranges[:, 0]).expand(*self.batch_size, len(ranges))
        high = torch.as_tensor(ranges[:, 1]).expand(*self.batch_size, len(ranges))
        return Bounded(low=low, high=high, shape=(*self.batch_size, len(ranges)))

    # ---------------------------------------------------------------------------- env contract
    def _set_seed(self, seed: int | None) -> None:
        self.np_random = np.random.default_rng(seed)

    def _gather(self) -> dict[str, torch.Tensor]:
        per_env = [self._observe(i) for i in range(self.num_envs)]
        out = {}
        for key in per_env[0]:
            stacked = np.stack([obs[key] for obs in per_env])
            tensor = torch.as_tensor(stacked)
            if tensor.dtype != torch.bool:
                tensor = tensor.to(torch.float32)
            out[key] = tensor.reshape(*self.batch_size, *stacked.shape[1:]).to(self.device)
        return out

    def get_state(self) -> TensorDict:
        """The simulator state: ``"qpos"`` ``[*B, nq]`` and ``"qvel"`` ``[*B, nv]`` (float64).

        Returns:
            A TensorDict of copies (changing it does not change the simulation).
        """
        qpos = np.stack([d.qpos for d in self.data]).reshape(*self.batch_size, -1)
        qvel = np.stack([d.qvel for d in self.data]).reshape(*self.batch_size, -1)
        return TensorDict(
            {"qpos": torch.as_tensor(qpos.copy()), "qvel": torch.as_tensor(qvel.copy())},
            batch_size=self.batch_size,
        )

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        which: list[int] = list(range(self.num_envs))
        if tensordict is not None:
            mask = tensordict.get(RESET, None)
            if mask is not None:
                which = mask.reshape(-1).nonzero().squeeze(-1).tolist()
        mj = self._mujoco
        for i in which:
            data = self.data[i]
            mj.mj_resetData(self.model, data)
            self._reset_one(i, tensordict)
            mj.mj_forward(self.model, data)
            self._elapsed[i] = 0
        done = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        return TensorDict(
            {
                **self._gather(),
                **self._extra_reset_entries(),
                DONE: done,
                TERMINATED: done.clone(),
                TRUNCATED: done.clone(),
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict[ACTION].detach().cpu().to(torch.float64)
        actions = action.reshape(self.num_envs, -1).numpy()
        mj = self._mujoco
        rewards = np.empty(self.num_envs)
        terminated = np.empty(self.num_envs, dtype=bool)
        for i, data in enumerate(self.data):
            data.ctrl[:] = self._ctrl(actions[i])
            mj.mj_step(self.model, data, nstep=self.frame_skip)
            rewards[i] = self._reward(i, actions[i])
            terminated[i] = self._terminated(i)
        self._elapsed += 1
        shape = (*self.batch_size, 1)
        if self.max_episode_steps is None:
            truncated = np.zeros(self.num_envs, dtype=bool)
        else:
            truncated = (self._elapsed >= self.max_episode_steps) & ~terminated
        term = torch.as_tensor(terminated).reshape(shape).to(self.device)
        trunc = torch.as_tensor(truncated).reshape(shape).to(self.device)
        return TensorDict(
            {
                **self._gather(),
                REWARD: torch.as_tensor(rewards, dtype=torch.float32)
                .reshape(shape)
                .to(self.device),
                DONE: term | trunc,
                TERMINATED: term,
                TRUNCATED: trunc,
            },
            batch_size=self.batch_size,
            device=self.device,
        )
