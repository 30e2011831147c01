"""OpenAI Procgen's procedurally generated games behind the torchrl env contract.

Procgen (``procgen`` or its ``procgen-mirror`` rebuild, same import name) runs ``num`` copies of
one game in C++ behind the ``gym3`` API: ``act(actions)`` then ``observe() -> (reward, obs,
first)``. The wrapper's batch size is ``[num]``; observations are the 64x64 RGB frames as uint8
``"observation"`` of shape ``[num, 3, 64, 64]`` (channels first, a view of procgen's array),
actions are ``Categorical(15)`` indices, rewards float32 ``[num, 1]``.

Semantics that differ from procgen's own and why:

* Procgen resets a sub-env itself at the end of its episode, inside the step: the observation
  that comes with ``first=True`` is already the first frame of the next level (the last frame of
  the finished one is never shown). So on a done step ``("next", "observation")`` holds that
  first frame, and the reset that follows (``"_reset"`` on the done sub-envs, as
  ``step_and_maybe_reset`` and the collectors send it) costs nothing.
* Procgen cannot restart a running sub-env. A reset of one that is mid-episode (a full
  ``reset()`` after some steps, or a ``"_reset"`` mask on a sub-env that is not done) gives it
  the state of a freshly built one-level env (procgen's ``get_state``/``set_state``), with a
  level seed drawn from the wrapper's seeded generator.
* Procgen does not say whether an episode ended by the game's own time limit: every end is
  ``terminated`` and ``truncated`` is always false.
* Seeds are fixed when the C env is built, so ``set_seed`` rebuilds it with ``rand_seed=seed``
  (about 10 ms once the library is loaded; the first build in a process takes seconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Categorical, Composite, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["ProcgenEnv", "ProcgenWrapper"]

_has_procgen = has_module("procgen")

# options that BaseProcgenEnv.__init__ writes itself from its keyword arguments; every other
# entry of ``env.options`` is a game option (center_agent, distribution_mode, ...)
_BUILDER_OPTIONS = frozenset(
    {
        "env_name",
        "num_levels",
        "start_level",
        "num_actions",
        "use_sequential_levels",
        "debug_mode",
        "rand_seed",
        "num_threads",
        "render_human",
        "resource_root",
    }
)


def _procgen_env_module() -> Any:
    import_optional("procgen", extra="procgen")
    return import_optional("procgen.env", extra="procgen")


def _available_envs(cls: type) -> list[str]:
    if not _has_procgen:
        return []
    return list(_procgen_env_module().ENV_NAMES)


def _unwrap(env: Any) -> Any:
    """The gym3 env under ``procgen.ProcgenEnv``'s baselines adapter (or ``env`` itself)."""
    base = _procgen_env_module().BaseProcgenEnv
    if isinstance(env, base):
        return env
    inner = getattr(env, "env", None)
    if isinstance(inner, base):
        return inner
    raise TypeError(
        f"ProcgenWrapper: env must be a procgen env (procgen.ProcgenGym3Env or "
        f"procgen.ProcgenEnv), got {type(env).__name__}: {env!r}"
    )


def _build_like(env: Any, num: int, seed: int, num_threads: int | None = None) -> Any:
    """A new procgen env with ``env``'s game and options, ``num`` copies and ``rand_seed=seed``."""
    options = env.options
    game = {k: v for k, v in options.items() if k not in _BUILDER_OPTIONS}
    return _procgen_env_module().BaseProcgenEnv(
        num=num,
        env_name=options["env_name"],
        options=game,
        rand_seed=seed,
        num_levels=options["num_levels"],
        start_level=options["start_level"],
        use_sequential_levels=options["use_sequential_levels"],
        debug_mode=options["debug_mode"],
        num_threads=options["num_threads"] if num_threads is None else num_threads,
        render_mode="rgb_array" if options["render_human"] else None,
    )


class ProcgenWrapper(EnvBase):
    """Wraps a procgen env (``procgen.ProcgenGym3Env`` or ``procgen.ProcgenEnv``) as a torchrl env.

    The batch size is ``[num]`` (the number of copies procgen runs). ``"observation"`` is the
    uint8 frame ``[num, 3, 64, 64]``, ``"action"`` a ``Categorical(15)`` index, rewards float32
    ``[num, 1]``. Procgen restarts finished sub-envs itself, so the observation of a done step is
    the first frame of the next level; a reset of a sub-env that is mid-episode gives it a fresh
    level (see the module docstring). ``set_seed`` rebuilds the C env with the new seed.

    Args:
        env: a procgen env, e.g. ``procgen.ProcgenGym3Env(num=4, env_name="coinrun")``.
        device: the device of the output tensors (procgen runs on the CPU).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec.

    Examples:
        >>> from procgen import ProcgenGym3Env
        >>> from torchrl.envs.libs.procgen import ProcgenWrapper
        >>> env = ProcgenWrapper(ProcgenGym3Env(num=2, env_name="coinrun", rand_seed=0))
        >>> td = env.rollout(3)
        >>> td.batch_size, td["next", "observation"].shape, td["action"].dtype
        (torch.Size([2, 3]), torch.Size([2, 3, 3, 64, 64]), torch.int64)
    """

    _handles_partial_reset = True
    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        env: Any = None,
        *,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        env = _unwrap(env)
        num = int(env.num)
        super().__init__(
            device=device,
            batch_size=[num],
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self._flag_shape = (num, 1)
        # sub-envs whose current observation is the first frame of an episode
        self._at_start = np.ones(num, dtype=bool)
        self._levels = np.random.default_rng(int(env.options["rand_seed"]))
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped gym3 procgen env (a new one after each ``set_seed``)."""
        return self._env

    @property
    def env_name(self) -> str:
        """The procgen game, e.g. ``"coinrun"``."""
        return str(self._env.options["env_name"])

    def _make_specs(self) -> None:
        env, batch, device = self._env, self.batch_size, self.device
        ob_space = env.ob_space["rgb"]
        h, w, c = ob_space.shape
        frame = Bounded(0, 255, shape=(*batch, c, h, w), dtype=torch.uint8, device=device)
        self.observation_spec = Composite({OBSERVATION: frame}, shape=batch, device=device)
        n = int(env.ac_space.eltype.n)
        self.full_action_spec = Composite(
            {ACTION: Categorical(n, shape=batch, dtype=torch.int64, device=device)},
            shape=batch,
            device=device,
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        seed = int(seed) % 2**31
        old = self._env
        self._env = _build_like(old, int(old.num), seed)
        old.close()
        self._at_start[:] = True
        self._levels = np.random.default_rng(seed)

    def _output(self, data: dict[str, Any]) -> TensorDictBase:
        device = self.device
        if device is None or device.type == "cpu":
            return new_unchecked(data, batch_size=self.batch_size, device=device)
        return TensorDict(data, batch_size=self.batch_size, device=device)

    def _observation(self, rgb: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(rgb).permute(0, 3, 1, 2)

    def _restart(self, rows: np.ndarray) -> None:
        """Gives the sub-envs ``rows`` (indices) the state of a freshly built level."""
        seed = int(self._levels.integers(2**31))
        fresh = _build_like(self._env, len(rows), seed, num_threads=0)
        try:
            new_states = fresh.get_state()
        finally:
            fresh.close()
        states = self._env.get_state()
        for row, state in zip(rows.tolist(), new_states):
            states[row] = state
        self._env.set_state(states)
        self._at_start[rows] = True

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = tensordict.get(RESET, None) if tensordict is not None else None
        if mask is None:
            wanted = np.ones(self.batch_size[0], dtype=bool)
        else:
            wanted = mask.reshape(self.batch_size).cpu().numpy()
        running = np.flatnonzero(wanted & ~self._at_start)
        if running.size:
            self._restart(running)
        _, obs, _ = self._env.observe()
        flags = torch.zeros(self._flag_shape, dtype=torch.bool)
        data = {
            OBSERVATION: self._observation(obs["rgb"]),
            DONE: flags,
            TERMINATED: flags.clone(),
            TRUNCATED: flags.clone(),
        }
        if mask is not None and not wanted.all() and tensordict is not None:
            # the sub-envs left alone keep their done flags
            keep = torch.from_numpy(~wanted).unsqueeze(-1)
            for key in (DONE, TERMINATED):
                previous = tensordict.get(key, None)
                if isinstance(previous, torch.Tensor) and previous.shape == keep.shape:
                    data[key] = previous.cpu() & keep
        return self._output(data)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(ACTION).reshape(self.batch_size)
        self._env.act(action.cpu().numpy().astype(np.int32, copy=False))
        reward, obs, first = self._env.observe()
        self._at_start = np.asarray(first, dtype=bool).copy()
        done = torch.from_numpy(self._at_start.reshape(self._flag_shape))
        data = {
            OBSERVATION: self._observation(obs["rgb"]),
            REWARD: torch.from_numpy(np.asarray(reward, dtype=np.float32).reshape(done.shape)),
            DONE: done,
            TERMINATED: done.clone(),
            TRUNCATED: torch.zeros(self._flag_shape, dtype=torch.bool),
        }
        return self._output(data)

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.env_name}, num_envs={self.batch_size[0]}, "
            f"device={self.device})"
        )


class ProcgenEnv(ProcgenWrapper):
    """Builds a procgen game by name and wraps it (:class:`ProcgenWrapper`).

    Args:
        env_name: the game, one of ``ProcgenEnv.available_envs`` (e.g. ``"coinrun"``).
        num_envs: how many copies procgen runs (the env's batch size).
        distribution_mode: procgen's level distribution, ``"easy"`` or ``"hard"`` (and
            ``"extreme"``, ``"memory"``, ``"exploration"`` for the games that have them).
        num_levels: how many distinct levels to draw from (``0``: unlimited).
        start_level: the first level seed of that set.
        seed: procgen's ``rand_seed`` (``None``: a random one; ``set_seed`` rebuilds with a new one).
        device: see :class:`ProcgenWrapper`.
        allow_done_after_reset: see :class:`ProcgenWrapper`.
        validate_actions: see :class:`ProcgenWrapper`.
        **kwargs: other options of ``procgen.ProcgenGym3Env`` (``use_backgrounds``, ``num_threads``...).

    Examples:
        >>> from torchrl.envs.libs.procgen import ProcgenEnv
        >>> env = ProcgenEnv("coinrun", num_envs=2, distribution_mode="easy", seed=0)
        >>> env
        ProcgenEnv(env=coinrun, num_envs=2, device=cpu)
        >>> env.rollout(4, break_when_any_done=False)["next", "reward"].shape
        torch.Size([2, 4, 1])
    """

    def __init__(
        self,
        env_name: str,
        num_envs: int = 1,
        *,
        distribution_mode: str = "hard",
        num_levels: int = 0,
        start_level: int = 0,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        module = _procgen_env_module()
        if env_name not in module.ENV_NAMES:
            raise ValueError(
                f"ProcgenEnv: env_name must be one of {sorted(module.ENV_NAMES)}, got {env_name!r}"
            )
        if int(num_envs) < 1:
            raise ValueError(f"ProcgenEnv: num_envs must be >= 1, got {num_envs}")
        env = module.ProcgenGym3Env(
            num=int(num_envs),
            env_name=env_name,
            distribution_mode=distribution_mode,
            num_levels=int(num_levels),
            start_level=int(start_level),
            rand_seed=None if seed is None else int(seed) % 2**31,
            **kwargs,
        )
        super().__init__(
            env,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
