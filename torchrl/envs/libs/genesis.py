"""Genesis (torch-native physics) scenes behind the torchrl env contract.

Genesis is a physics engine, not a task suite: a ``gs.Scene`` holds entities (a plane, a robot
loaded from MJCF/URDF, ...) and, once built with ``scene.build(n_envs=N)``, simulates ``N``
worlds at once, reading and writing batched torch tensors on Genesis's device (``gs.device``).
:class:`GenesisWrapper` turns a built scene into a torchrl env through four overridable hooks
(observations, action, reward, truncation) that work on those tensors directly: no host copies.
:class:`GenesisEnv` builds the named tasks shipped here (``"franka_reach"``).

``genesis-world`` installs in its own venv here (it downgrades Pillow and adds ``opencv-python``
beside ``opencv-python-headless``; see ``docs/simulators.rst``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.batched import ParallelEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["GenesisEnv", "GenesisWrapper"]

_has_genesis = has_module("genesis")

_RESERVED = {ACTION, REWARD, DONE, TERMINATED, TRUNCATED, "next", "_reset", "_step"}


def _gs() -> Any:
    return import_optional("genesis", extra="genesis")


def _init_genesis(device: DeviceLike, seed: int | None = None) -> torch.device:
    """Calls ``gs.init`` with the backend of ``device`` unless Genesis is initialised; its device."""
    gs = _gs()
    want = torch.device(device) if device is not None else torch.get_default_device()
    if not gs._initialized:
        backend = gs.cpu if want.type == "cpu" else gs.gpu
        gs.init(backend=backend, logging_level="warning", seed=seed)
    have = torch.device(gs.device)
    if have.type != want.type:
        raise RuntimeError(
            f"GenesisEnv: Genesis is already initialised on {have}, but device={want} was asked "
            "for; build every Genesis env of a process on one device"
        )
    return have


def _entity_name(entity: Any, index: int) -> str:
    """An entity's name without the random uid suffix Genesis appends to generated names."""
    name = getattr(entity, "name", None) or f"entity{index}"
    uid = getattr(entity, "uid", None)
    suffix = f"_{uid.short()}" if uid is not None and hasattr(uid, "short") else None
    if suffix and name.endswith(suffix):
        name = name[: -len(suffix)]
    return name


class GenesisWrapper(EnvBase):
    """Wraps a built Genesis scene behind the torchrl env contract.

    The batch size is ``[scene.n_envs]`` (``[]`` for a scene built with ``n_envs=0``). A task is
    given by overriding the hooks, all of which read and write Genesis's batched torch state:

    * ``_make_obs()``: a ``dict[str, Tensor]`` (or one tensor, stored as ``"observation"``).
      Default: ``"{name}_qpos"`` and ``"{name}_qvel"`` of every entity with DoFs (``name``: the
      entity's name without the random uid suffix Genesis gives generated names, e.g. ``panda``).
    * ``_apply_action(action)``: pushes the action into the scene before ``scene.step()``.
      Default: position targets of the first entity with DoFs (``control_dofs_position``).
    * ``_compute_reward()``: the reward of one physics step, ``[*batch]`` or ``[*batch, 1]``;
      summed over the ``frame_skip`` physics steps. Default: 0.
    * ``_compute_done()``: the truncation flag. Default: the per-env step count has reached
      ``max_steps``.
    * ``_compute_terminated()``: the termination flag. Default: never.
    * ``_on_reset(envs_idx)``: called after ``scene.reset(envs_idx=...)`` (``None``: every env),
      e.g. to draw new goals with ``self.generator``.

    ``"_reset"`` resets exactly the masked envs (``scene.reset(envs_idx=...)``); ``set_seed``
    seeds ``self.generator`` (the randomness of the hooks; Genesis's own reset is deterministic).

    Args:
        scene: a built ``genesis.Scene``.
        max_steps: the truncation horizon of the default ``_compute_done``.
        frame_skip: physics steps per env step (the action is applied once).
        from_pixels: not supported (``True`` raises).
        pixels_key: the key pixels would use.
        device: the tensors' device; must be Genesis's (default: ``gs.device``).
        batch_size: ``[scene.n_envs]`` (the default); other shapes raise.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.

    Examples:
        >>> import genesis as gs  # doctest: +SKIP
        >>> from torchrl.envs.libs.genesis import GenesisWrapper
        >>> gs.init(backend=gs.cpu)  # doctest: +SKIP
        >>> scene = gs.Scene(show_viewer=False)  # doctest: +SKIP
        >>> _ = scene.add_entity(gs.morphs.Plane())  # doctest: +SKIP
        >>> _ = scene.add_entity(gs.morphs.MJCF(file="xml/franka_emika_panda/panda.xml"))  # doctest: +SKIP
        >>> scene.build(n_envs=4)  # doctest: +SKIP
        >>> env = GenesisWrapper(scene, max_steps=100)  # doctest: +SKIP
        >>> env.rollout(3)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 3, 1])
    """

    _handles_partial_reset = True

    def __init__(
        self,
        scene: Any = None,
        *,
        max_steps: int = 1000,
        frame_skip: int = 1,
        from_pixels: bool = False,
        pixels_key: str = "pixels",
        device: DeviceLike = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        gs = _gs()
        if not isinstance(scene, gs.Scene):
            raise TypeError(
                f"{type(self).__name__}: scene must be a genesis Scene, got {type(scene).__name__}"
            )
        if not scene.is_built:
            raise ValueError(
                f"{type(self).__name__}: the scene is not built; call scene.build(n_envs=...) "
                "first (entities cannot be added after the build)"
            )
        if from_pixels:
            raise NotImplementedError(
                f"{type(self).__name__}: from_pixels=True is not supported (no camera rendering "
                "is wired here)"
            )
        if int(max_steps) < 1 or int(frame_skip) < 1:
            raise ValueError(
                f"{type(self).__name__}: max_steps and frame_skip must be >= 1, got "
                f"max_steps={max_steps}, frame_skip={frame_skip}"
            )
        sim_device = torch.device(gs.device)
        device = sim_device if device is None else torch.device(device)
        if device.type != sim_device.type:
            raise ValueError(
                f"{type(self).__name__}: device={device} differs from Genesis's ({sim_device}); "
                "initialise Genesis (gs.init) on the device you want"
            )
        n_envs = int(scene.n_envs)
        native = torch.Size([n_envs] if n_envs > 0 else [])
        batch = native if batch_size is None else torch.Size(batch_size)
        if batch != native:
            raise ValueError(
                f"{type(self).__name__}: batch_size must be the scene's [n_envs] = "
                f"{list(native)}, got {list(batch)}"
            )
        super().__init__(
            device=sim_device,
            batch_size=batch,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._scene = scene
        self._max_steps = int(max_steps)
        self._frame_skip = int(frame_skip)
        self.pixels_key = pixels_key
        self.generator = torch.Generator(device=sim_device)
        self._current_step = torch.zeros(batch, dtype=torch.long, device=sim_device)
        self._make_specs()

    @property
    def scene(self) -> Any:
        """The wrapped Genesis scene."""
        return self._scene

    # ------------------------------------------------------------------ hooks
    def _actuated_entity(self) -> Any:
        for entity in self._scene.entities:
            if getattr(entity, "n_dofs", 0) > 0:
                return entity
        raise ValueError(
            f"{type(self).__name__}: the scene has no entity with DoFs to act on; override "
            "_apply_action and _make_action_spec"
        )

    def _make_obs(self) -> dict[str, torch.Tensor] | torch.Tensor:
        """Reads the observations off the scene (default: qpos/qvel of each entity with DoFs)."""
        obs = {}
        for i, entity in enumerate(self._scene.entities):
            if getattr(entity, "n_dofs", 0) > 0:
                name = _entity_name(entity, i)
                obs[f"{name}_qpos"] = entity.get_dofs_position()
                obs[f"{name}_qvel"] = entity.get_dofs_velocity()
        return obs

    def _make_action_spec(self) -> TensorSpec:
        """The action spec (default: the DoF limits of the first entity with DoFs)."""
        entity = self._actuated_entity()
        shape = (*self.batch_size, entity.n_dofs)
        lower, upper = entity.get_dofs_limit()
        if lower.dim() > 1:  # batched limits: every env has the same ones by default
            lower, upper = lower[0], upper[0]
        lower = lower.to(torch.float32).expand(shape)
        upper = upper.to(torch.float32).expand(shape)
        if bool(torch.isfinite(lower).all() and torch.isfinite(upper).all()):
            return Bounded(lower.clone(), upper.clone(), shape=shape, device=self.device)
        return Unbounded(shape=shape, dtype=torch.float32, device=self.device)

    def _apply_action(self, action: torch.Tensor) -> None:
        """Pushes the action into the scene (default: DoF position targets)."""
        self._actuated_entity().control_dofs_position(action)

    def _compute_reward(self) -> torch.Tensor:
        """The reward of one physics step (default: zeros)."""
        return torch.zeros(self.batch_size, dtype=torch.float32, device=self.device)

    def _compute_done(self) -> torch.Tensor:
        """The truncation flag (default: the step count reached ``max_steps``)."""
        return self._current_step >= self._max_steps

    def _compute_terminated(self) -> torch.Tensor:
        """The termination flag (default: never)."""
        return torch.zeros(self.batch_size, dtype=torch.bool, device=self.device)

    def _on_reset(self, envs_idx: torch.Tensor | None) -> None:
        """Called after the scene reset ``envs_idx`` (``None``: every env); default: nothing."""

    # ------------------------------------------------------------- plumbing
    def _obs_dict(self) -> dict[str, torch.Tensor]:
        obs = self._make_obs()
        if isinstance(obs, torch.Tensor):
            obs = {"observation": obs}
        return obs

    def _make_specs(self) -> None:
        spec = Composite(shape=self.batch_size, device=self.device)
        for key, value in self._obs_dict().items():
            if key in _RESERVED:
                raise ValueError(
                    f"{type(self).__name__}: the observation {key!r} collides with a reserved "
                    f"torchrl key ({sorted(_RESERVED)})"
                )
            if tuple(value.shape[: len(self.batch_size)]) != tuple(self.batch_size):
                raise ValueError(
                    f"{type(self).__name__}: the observation {key!r} has shape "
                    f"{tuple(value.shape)}, expected a leading {tuple(self.batch_size)}"
                )
            spec[key] = Unbounded(shape=value.shape, dtype=value.dtype, device=self.device)
        self.observation_spec = spec
        self.action_spec = self._make_action_spec()
        self.reward_spec = Unbounded(
            shape=(*self.batch_size, 1), dtype=torch.float32, device=self.device
        )

    def _flag(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(device=self.device, dtype=torch.bool).reshape(*self.batch_size, 1)

    def _set_seed(self, seed: int | None) -> None:
        seed = int(seed) if seed is not None else int(torch.seed() % (2**63))
        self.generator.manual_seed(seed)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        envs_idx = None
        if mask is not None and len(self.batch_size) and not bool(mask.all()):
            envs_idx = mask.reshape(-1).nonzero().squeeze(-1).to(self.device)
        self._scene.reset(envs_idx=envs_idx)
        if envs_idx is None:
            self._current_step.zero_()
        else:
            self._current_step[envs_idx] = 0
        self._on_reset(envs_idx)
        false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        data = {
            **self._obs_dict(),
            DONE: false,
            TERMINATED: false.clone(),
            TRUNCATED: false.clone(),
        }
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._apply_action(tensordict.get(ACTION))
        reward = torch.zeros((*self.batch_size, 1), dtype=torch.float32, device=self.device)
        for _ in range(self._frame_skip):
            self._scene.step()
            reward = reward + self._compute_reward().to(torch.float32).reshape(reward.shape)
        self._current_step += 1
        terminated = self._flag(self._compute_terminated())
        truncated = self._flag(self._compute_done()) & ~terminated
        data = {
            **self._obs_dict(),
            REWARD: reward,
            DONE: terminated | truncated,
            TERMINATED: terminated,
            TRUNCATED: truncated,
        }
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def __repr__(self) -> str:
        name = getattr(self, "env_name", None) or "scene"
        return (
            f"{type(self).__name__}(env={name}, batch_size={self.batch_size}, device={self.device})"
        )


class _FrankaReach(GenesisWrapper):
    """Franka Panda on a plane: move the hand to a goal drawn per env at reset."""

    _franka: Any
    _hand: Any
    _goal: torch.Tensor

    def _make_obs(self) -> dict[str, torch.Tensor]:
        franka = self._franka
        return {
            "qpos": franka.get_dofs_position(),
            "qvel": franka.get_dofs_velocity(),
            "hand_pos": self._hand.get_pos(),
            "goal_pos": self._goal,
        }

    def _apply_action(self, action: torch.Tensor) -> None:
        self._franka.control_dofs_position(action)

    def _compute_reward(self) -> torch.Tensor:
        return -(self._hand.get_pos() - self._goal).norm(dim=-1)

    def _on_reset(self, envs_idx: torch.Tensor | None) -> None:
        n = self._goal.shape[:-1].numel() if envs_idx is None else envs_idx.numel()
        low = torch.tensor([0.3, -0.3, 0.2], device=self.device)
        high = torch.tensor([0.7, 0.3, 0.7], device=self.device)
        goal = low + (high - low) * torch.rand(n, 3, generator=self.generator, device=self.device)
        if envs_idx is None:
            self._goal.copy_(goal.reshape(self._goal.shape))
        else:
            self._goal[envs_idx] = goal


_BUILDERS: dict[str, type[GenesisWrapper]] = {"franka_reach": _FrankaReach}


def _available_envs(cls: type) -> list[str]:
    """The task names :class:`GenesisEnv` builds."""
    return sorted(_BUILDERS)


class GenesisEnv(GenesisWrapper):
    """Builds a named Genesis task (a scene plus its hooks) and wraps it.

    ``"franka_reach"``: a plane and the Franka Panda bundled with Genesis; the action is the 9
    joint position targets (bounded by the joint limits), the observation ``"qpos"``,
    ``"qvel"``, ``"hand_pos"`` and ``"goal_pos"`` (a goal drawn per env at each reset), the reward
    minus the hand-goal distance, truncation after ``max_steps``. For other tasks, build a scene
    and subclass :class:`GenesisWrapper`. Genesis is initialised on ``device`` if it is not yet
    (``gs.init``); a process holds Genesis on one device only.

    Args:
        env_name: one of ``GenesisEnv.available_envs``.
        task_name: unused by the tasks here (kept for the keyword's sake).
        num_workers: more than 1 returns a :class:`~torchrl.envs.ParallelEnv` of that many
            copies instead (spawned workers, each importing Genesis and building its own scene).
        max_steps: the truncation horizon.
        frame_skip: physics steps per env step.
        from_pixels: not supported (``True`` raises).
        pixels_key: the key pixels would use.
        pixels_res: the camera resolution pixels would use.
        device: the simulation device (default: ``torch.get_default_device()``).
        batch_size: ``[n_envs]`` builds ``n_envs`` worlds; ``[]`` (the default) one, unbatched.
        **kwargs: the other keyword arguments of :class:`GenesisWrapper`.

    Examples:
        >>> from torchrl.envs.libs.genesis import GenesisEnv
        >>> env = GenesisEnv("franka_reach", batch_size=[4], device="cpu")  # doctest: +SKIP
        >>> env.rollout(2)["next", "hand_pos"].shape  # doctest: +SKIP
        torch.Size([4, 2, 3])
    """

    available_envs = ClassProperty(_available_envs)

    def __new__(cls, *args: Any, num_workers: int | None = None, **kwargs: Any) -> Any:
        # num_workers > 1 builds the ParallelEnv of single copies instead
        if num_workers is not None and int(num_workers) > 1:
            # spawn: a forked child inherits the parent's torch/Genesis threads and can hang
            return ParallelEnv(
                int(num_workers),
                functools.partial(cls, *args, **kwargs),
                mp_start_method="spawn",
            )
        return super().__new__(cls)

    def __init__(
        self,
        env_name: str = "franka_reach",
        task_name: str | None = None,
        *,
        num_workers: int | None = None,
        max_steps: int = 1000,
        frame_skip: int = 1,
        from_pixels: bool = False,
        pixels_key: str = "pixels",
        pixels_res: tuple[int, int] = (320, 320),
        device: DeviceLike = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        **kwargs: Any,
    ) -> None:
        if env_name not in _BUILDERS:
            raise ValueError(
                f"GenesisEnv: no task {env_name!r}; available: {sorted(_BUILDERS)} (for another "
                "task, build a scene and subclass GenesisWrapper)"
            )
        if from_pixels:
            raise NotImplementedError("GenesisEnv: from_pixels=True is not supported")
        batch = torch.Size(batch_size if batch_size is not None else [])
        if len(batch) > 1:
            raise ValueError(f"GenesisEnv: batch_size must be [] or [n_envs], got {list(batch)}")
        gs = _gs()
        sim_device = _init_genesis(device)
        scene = gs.Scene(show_viewer=False)
        scene.add_entity(gs.morphs.Plane())
        franka = scene.add_entity(gs.morphs.MJCF(file="xml/franka_emika_panda/panda.xml"))
        scene.build(n_envs=int(batch[0]) if len(batch) else 0)
        self.env_name = env_name
        self.task_name = task_name
        # the task's state, read by the hooks (set before the wrapper builds the specs)
        self._franka = franka
        self._hand = franka.get_link("hand")
        self._goal = torch.zeros((*batch, 3), dtype=torch.float32, device=sim_device)
        self._task = _BUILDERS[env_name]
        super().__init__(
            scene,
            max_steps=max_steps,
            frame_skip=frame_skip,
            pixels_key=pixels_key,
            device=sim_device,
            batch_size=batch,
            **kwargs,
        )

    def _make_obs(self) -> dict[str, torch.Tensor] | torch.Tensor:
        return self._task._make_obs(self)  # type: ignore[arg-type]

    def _apply_action(self, action: torch.Tensor) -> None:
        self._task._apply_action(self, action)  # type: ignore[arg-type]

    def _compute_reward(self) -> torch.Tensor:
        return self._task._compute_reward(self)  # type: ignore[arg-type]

    def _on_reset(self, envs_idx: torch.Tensor | None) -> None:
        self._task._on_reset(self, envs_idx)  # type: ignore[arg-type]
