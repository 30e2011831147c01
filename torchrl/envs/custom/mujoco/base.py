"""The base of the MuJoCo locomotion envs: the ``mujoco`` package driven directly.

A subclass names its model and writes what is specific to its task: the observation, the
forward position, the healthy test and (optionally) a contact cost. The base class builds the
specs from the model, runs one ``MjData`` per sub-env, steps ``frame_skip`` physics steps per
env step, and computes the reward shared by the locomotion tasks::

    reward = forward_reward_weight * forward_velocity + healthy_reward * is_healthy
             - ctrl_cost_weight * sum(action ** 2) - contact_cost

(gymnasium's v5 definitions: the healthy reward is paid only while healthy).

``terminated`` is ``not healthy`` (when ``terminate_when_unhealthy``); nothing truncates: add a
step limit (a ``StepCounter`` transform, e.g. ``max_steps=1000`` as gymnasium does).
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs import Bounded, Composite, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.custom.mujoco._scene import import_mujoco, sim_batch_size

if TYPE_CHECKING:
    import mujoco

__all__ = ["MujocoEnv"]

_EXTRA = 'pip install "torchrl[mujoco]"'


def gymnasium_asset(name: str) -> str:
    """The path of an MJCF model shipped with gymnasium's MuJoCo envs (not imported).

    Args:
        name: the file name, e.g. ``"hopper.xml"``.

    Returns:
        The absolute path of ``gymnasium/envs/mujoco/assets/<name>``.

    Raises:
        ImportError: gymnasium is not installed (it comes with the ``mujoco`` extra).
        FileNotFoundError: gymnasium ships no such model.

    Examples:
        >>> from torchrl.envs.custom.mujoco.base import gymnasium_asset
        >>> gymnasium_asset("hopper.xml").endswith("hopper.xml")
        True
    """
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the MuJoCo envs load their models from gymnasium's MuJoCo assets: {_EXTRA}"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], "envs", "mujoco", "assets", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"gymnasium ships no MuJoCo model {name!r} (looked at {path})")
    return path


class MujocoEnv(EnvBase):
    """Base of the locomotion envs that drive the ``mujoco`` package directly (no gymnasium loop).

    ``"observation"`` (float32, ``[*B, obs_dim]``) is the task's; the action (float32,
    ``[*B, nu]``) is bounded by the actuators' control ranges. Each sub-env has its own
    ``MjData``; stepping loops over them. See the module docstring for the reward.

    Args:
        num_envs: the number of simulations (batch ``[num_envs]``); ``None`` (default) gives one
            simulation with batch ``[]``.
        batch_size: an alternative to ``num_envs``: ``[]`` or ``[n]``.
        frame_skip: physics steps per env step (default: the task's).
        reset_noise_scale: scale of the noise added to the initial state (default: the task's).
        terminate_when_unhealthy: terminate episodes when the body is unhealthy (default True).
        xml_file: a path to an MJCF model replacing the task's (it must have the same joints).
        backend: the physics backend; only ``"mujoco"`` (the C library) is available here.
        device: where the tensors live (the simulation runs on CPU).
        seed: the seed of the reset noise.
        validate_actions: check the actions against the action spec.

    Subclasses set ``XML_FILE``, ``FRAME_SKIP``, ``RESET_NOISE_SCALE``, the reward weights, and
    write ``_observation``, ``_forward_position`` and ``_is_healthy``.

    Examples:
        gymnasium's inverted pendulum as a task: +1 per step while the pole stays upright:

        >>> import numpy as np
        >>> from torchrl.envs import MujocoEnv
        >>> class InvertedPendulum(MujocoEnv):
        ...     XML_FILE = "inverted_pendulum.xml"
        ...     FRAME_SKIP = 2
        ...     FORWARD_REWARD_WEIGHT = 0.0
        ...     def _observation(self, data):
        ...         return np.concatenate([data.qpos, data.qvel])
        ...     def _forward_position(self, data):
        ...         return 0.0
        ...     def _is_healthy(self, data):
        ...         return abs(data.qpos[1]) <= 0.2
        >>> env = InvertedPendulum(num_envs=2, seed=0)
        >>> env.observation_spec["observation"].shape, env.action_spec.shape
        (torch.Size([2, 4]), torch.Size([2, 1]))
        >>> import torch
        >>> zero_torque = lambda td: td.set("action", torch.zeros(2, 1))
        >>> env.rollout(3, zero_torque)["next", "reward"].squeeze(-1)  # the pole stays up
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
    """

    XML_FILE: ClassVar[str] = ""
    FRAME_SKIP: ClassVar[int] = 1
    RESET_NOISE_SCALE: ClassVar[float] = 0.0
    FORWARD_REWARD_WEIGHT: ClassVar[float] = 1.0
    CTRL_COST_WEIGHT: ClassVar[float] = 0.0
    HEALTHY_REWARD: ClassVar[float] = 1.0
    _handles_partial_reset = True

    def __init__(
        self,
        num_envs: int | None = None,
        *,
        batch_size: ShapeLike | None = None,
        frame_skip: int | None = None,
        reset_noise_scale: float | None = None,
        terminate_when_unhealthy: bool = True,
        xml_file: str | None = None,
        backend: str = "mujoco",
        device: DeviceLike = None,
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        name = type(self).__name__
        if backend != "mujoco":
            raise ValueError(
                f"{name}: backend {backend!r} is not available; only 'mujoco' (the MuJoCo C "
                f"library, {_EXTRA}) is implemented"
            )
        batch = sim_batch_size(name, num_envs, batch_size)
        self._mujoco = import_mujoco(name)
        path = xml_file if xml_file is not None else gymnasium_asset(self.XML_FILE)
        super().__init__(device=device, batch_size=batch, validate_actions=validate_actions)
        self.model: mujoco.MjModel = self._mujoco.MjModel.from_xml_path(path)
        self.frame_skip = int(self.FRAME_SKIP if frame_skip is None else frame_skip)
        if self.frame_skip < 1:
            raise ValueError(f"{name}: frame_skip must be >= 1, got {self.frame_skip}")
        noise = self.RESET_NOISE_SCALE if reset_noise_scale is None else reset_noise_scale
        self.reset_noise_scale = float(noise)
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.num_envs = int(batch.numel())
        self.data: list[mujoco.MjData] = [
            self._mujoco.MjData(self.model) for _ in range(self.num_envs)
        ]
        self.init_qpos = self.data[0].qpos.copy()
        self.init_qvel = self.data[0].qvel.copy()
        for data in self.data:
            self._mujoco.mj_forward(self.model, data)
        obs_dim = self._observation(self.data[0]).shape[0]
        low = torch.as_tensor(self.model.actuator_ctrlrange[:, 0], dtype=torch.float32)
        high = torch.as_tensor(self.model.actuator_ctrlrange[:, 1], dtype=torch.float32)
        nu = self.model.nu
        self.observation_spec = Composite(
            {OBSERVATION: Unbounded(shape=(*batch, obs_dim), dtype=torch.float32)}, shape=batch
        )
        self.action_spec = Bounded(
            low=low.expand(*batch, nu), high=high.expand(*batch, nu), shape=(*batch, nu)
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32)
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)

    @property
    def dt(self) -> float:
        """Seconds of simulated time per env step (``timestep * frame_skip``)."""
        return float(self.model.opt.timestep) * self.frame_skip

    # ----------------------------------------------------------------------- what tasks write
    def _observation(self, data: mujoco.MjData) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement _observation(data)")

    def _forward_position(self, data: mujoco.MjData) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement _forward_position(data)")

    def _is_healthy(self, data: mujoco.MjData) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement _is_healthy(data)")

    def _contact_cost(self, data: mujoco.MjData) -> float:
        return 0.0

    def _after_physics(self, data: mujoco.MjData) -> None:
        """Called after the physics steps of an env step (e.g. to compute contact forces)."""

    def _initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Initial ``(qpos, qvel)``: the model's, plus uniform noise of ``reset_noise_scale``."""
        scale = self.reset_noise_scale
        qpos = self.init_qpos + self.np_random.uniform(-scale, scale, self.model.nq)
        qvel = self.init_qvel + self.np_random.uniform(-scale, scale, self.model.nv)
        return qpos, qvel

    # -------------------------------------------------------------------------- the env contract
    def _set_seed(self, seed: int | None) -> None:
        self.np_random = np.random.default_rng(seed)

    def _observations(self) -> torch.Tensor:
        obs = np.stack([self._observation(d) for d in self.data])
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device).reshape(
            *self.batch_size, -1
        )

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
        which = range(self.num_envs)
        if tensordict is not None:
            mask = tensordict.get(RESET, None)
            if mask is not None:
                which = mask.reshape(-1).nonzero().squeeze(-1).tolist()
        mj = self._mujoco
        for i in which:
            data = self.data[i]
            mj.mj_resetData(self.model, data)
            qpos, qvel = self._initial_state()
            data.qpos[:] = qpos
            data.qvel[:] = qvel
            mj.mj_forward(self.model, data)
        done = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        return TensorDict(
            {
                OBSERVATION: self._observations(),
                DONE: done,
                TERMINATED: done.clone(),
                TRUNCATED: done.clone(),
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"].detach().cpu().to(torch.float64)
        action = action.reshape(self.num_envs, -1).numpy()
        mj = self._mujoco
        rewards = np.empty(self.num_envs)
        healthy = np.empty(self.num_envs, dtype=bool)
        for i, data in enumerate(self.data):
            before = self._forward_position(data)
            data.ctrl[:] = action[i]
            mj.mj_step(self.model, data, nstep=self.frame_skip)
            self._after_physics(data)
            velocity = (self._forward_position(data) - before) / self.dt
            healthy[i] = self._is_healthy(data)
            ctrl_cost = self.CTRL_COST_WEIGHT * float(np.square(action[i]).sum())
            healthy_reward = self.HEALTHY_REWARD * float(healthy[i])
            rewards[i] = (
                self.FORWARD_REWARD_WEIGHT * velocity
                + healthy_reward
                - ctrl_cost
                - self._contact_cost(data)
            )
        shape = (*self.batch_size, 1)
        terminated = torch.as_tensor(~healthy if self.terminate_when_unhealthy else healthy & False)
        terminated = terminated.reshape(shape).to(self.device)
        return TensorDict(
            {
                OBSERVATION: self._observations(),
                REWARD: torch.as_tensor(rewards, dtype=torch.float32, device=self.device).reshape(
                    shape
                ),
                DONE: terminated,
                TERMINATED: terminated.clone(),
                TRUNCATED: torch.zeros_like(terminated),
            },
            batch_size=self.batch_size,
            device=self.device,
        )
