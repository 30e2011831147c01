"""envpool's C++ thread-pool vector envs behind the torchrl env contract.

envpool (https://github.com/sail-sg/envpool) steps ``num_envs`` copies of an env in C++ threads
and hands back batched numpy arrays, so a step here is one ``env.step`` call, a few
``torch.from_numpy`` views (envpool allocates fresh output arrays at each call) and one
TensorDict. Only envpool's synchronous mode (``batch_size == num_envs``) is supported: the env's
batch size is ``[num_envs]`` and every step moves every sub-env.

Semantics that differ from envpool's own and why:

* envpool resets a finished sub-env on the *next* ``step`` call. torchrl resets finished sub-envs
  explicitly (``step_and_maybe_reset`` passes a ``"_reset"`` mask), which maps to envpool's
  ``reset(env_id)``; after it the next step is an ordinary one. Stepping a finished sub-env
  without resetting it first lets envpool reset it (reward 0, ``elapsed_step`` 0).
* envpool fixes its seeds when the pool is built (sub-env ``i`` gets ``seed + i``), so
  ``set_seed`` rebuilds the pool from its config with the new seed (about 1 ms for classic
  control). Seeds are taken modulo ``2**31`` (envpool wants an int32).
* ``frame_skip`` repeats an action and sums rewards per sub-env; a sub-env whose episode ends
  during the repeats stops there (only the others are stepped, through ``env_id``), so no episode
  boundary is ever skipped over.

Spaces map to specs as for :class:`~torchrl.envs.GymWrapper` (``_gym_spaces.py``): a ``Box``
observation goes under ``"observation"``, ``Dict`` observations keep their keys, ``Discrete``
actions are one-hot unless ``categorical_action_encoding=True``. Rewards are float32 ``[N, 1]``,
done flags bool ``[N, 1]``. envpool's ``info`` dict is not read.
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import (
    ACTION,
    DONE,
    NEXT,
    OBSERVATION,
    RESET,
    REWARD,
    TERMINATED,
    TRUNCATED,
)
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike, NestedKey
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Composite, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import (
    gym_to_torchrl_spec_transform,
    import_gymnasium,
    make_reader,
    make_writer,
)
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["MultiThreadedEnv", "MultiThreadedEnvWrapper"]

_has_envpool = has_module("envpool")

_RESERVED = frozenset({ACTION, REWARD, DONE, TERMINATED, TRUNCATED, RESET, NEXT})


def _envpool() -> Any:
    return import_optional("envpool", extra="envpool")


def _quietly(build: Any, *args: Any, **kwargs: Any) -> Any:
    # envpool declares float32 Boxes with float64 bounds; gymnasium warns about the cast on
    # every construction (and every set_seed), which says nothing actionable to our users
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32.*")
        return build(*args, **kwargs)


def _rebuild(env: Any, seed: int) -> Any:
    """A new pool with ``env``'s config (same task, size, options) and another seed."""
    spec_cls = type(env.spec)
    config = dict(env.config)
    config["seed"] = seed
    pool = _quietly(lambda: type(env)(spec_cls(spec_cls.gen_config(**config))))
    # envpool builds (and caches) its spaces on first access, e.g. in its first reset
    _quietly(lambda: (pool.observation_space, pool.action_space))
    return pool


def _sane_bounds(space: Any) -> Any:
    """``space`` with envpool's placeholder float bounds replaced by infinities.

    Some envpool tasks (its dm_control suite) declare unbounded floats as ``[tiny, max]`` (C++'s
    ``numeric_limits<double>::min()`` is the smallest *positive* double), which would make every
    negative observation fall outside its spec.
    """
    spaces = import_gymnasium().spaces
    if isinstance(space, spaces.Dict):
        return spaces.Dict({k: _sane_bounds(v) for k, v in space.spaces.items()})
    if not isinstance(space, spaces.Box) or not np.issubdtype(space.dtype, np.floating):
        return space
    info = np.finfo(space.dtype)
    low, high = np.array(space.low), np.array(space.high)
    low_placeholder = (low == info.tiny) | (low == -info.max)
    high_placeholder = high == info.max
    if not low_placeholder.any() and not high_placeholder.any():
        return space
    low[low_placeholder] = -np.inf
    high[high_placeholder] = np.inf
    return spaces.Box(low=low, high=high, shape=space.shape, dtype=space.dtype)


class MultiThreadedEnvWrapper(EnvBase):
    """Wraps an envpool pool (``envpool.make(..., env_type="gymnasium")``) as a torchrl env.

    The env's batch size is ``[num_envs]``. Observations, rewards ``[N, 1]`` and done flags
    ``[N, 1]`` follow :class:`~torchrl.envs.GymWrapper`'s layout; a ``"_reset"`` mask resets only
    the marked sub-envs (envpool's ``reset(env_id)``), and ``set_seed`` rebuilds the pool with
    the new seed. See the module docstring for the details of auto-reset and ``frame_skip``.

    Args:
        env: an envpool pool built with ``env_type="gymnasium"`` (or ``"gym"``, an alias in
            envpool 1.2) in synchronous mode (``batch_size`` equal to ``num_envs``).
        categorical_action_encoding: ``Discrete`` values as indices
            (:class:`~torchrl.data.Categorical`) instead of one-hot vectors.
        disable_env_checker: accepted for compatibility; envpool runs no env checker.
        frame_skip: repeat each action this many times, summing the rewards.
        device: the device of the output tensors (envpool itself runs on the CPU).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> import envpool  # doctest: +SKIP
        >>> from torchrl.envs import MultiThreadedEnvWrapper
        >>> pool = envpool.make_gymnasium("CartPole-v1", num_envs=4, seed=0)  # doctest: +SKIP
        >>> env = MultiThreadedEnvWrapper(pool)  # doctest: +SKIP
        >>> td = env.rollout(5, break_when_any_done=False)  # doctest: +SKIP
        >>> td.batch_size, td["next", "observation"].shape  # doctest: +SKIP
        (torch.Size([4, 5]), torch.Size([4, 5, 4]))
    """

    _handles_partial_reset = True

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        *,
        disable_env_checker: bool | None = None,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        _envpool()
        pool_base = import_optional("envpool.python.envpool", extra="envpool").EnvPoolMixin
        gymnasium_base = import_optional(
            "envpool.python.gymnasium_envpool", extra="envpool"
        ).GymnasiumEnvPoolMixin
        if not isinstance(env, pool_base):
            raise TypeError(
                f"MultiThreadedEnvWrapper needs an envpool pool (envpool.make(...)), got "
                f"{type(env).__name__}: {env!r}"
            )
        if not isinstance(env, gymnasium_base):
            raise TypeError(
                f"MultiThreadedEnvWrapper needs a pool made with env_type='gymnasium' (or 'gym'), "
                f"got a {type(env).__name__}; rebuild it with envpool.make(task, "
                f"env_type='gymnasium', ...)"
            )
        config = env.config
        num_envs = int(config["num_envs"])
        if int(config["batch_size"]) != num_envs:
            raise ValueError(
                f"MultiThreadedEnvWrapper supports envpool's synchronous mode only: the pool has "
                f"batch_size={config['batch_size']} and num_envs={num_envs}; build it with "
                f"batch_size={num_envs} (or leave batch_size out)"
            )
        if int(config.get("max_num_players", 1)) != 1:
            raise NotImplementedError(
                f"MultiThreadedEnvWrapper: multi-player envpool envs are not supported "
                f"(max_num_players={config['max_num_players']})"
            )
        frame_skip = 1 if frame_skip is None else int(frame_skip)
        if frame_skip < 1:
            raise ValueError(f"MultiThreadedEnvWrapper: frame_skip must be >= 1, got {frame_skip}")
        super().__init__(
            device=device,
            batch_size=[num_envs],
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        del disable_env_checker  # envpool has no env checker to disable
        self._env = env
        self._categorical = bool(categorical_action_encoding)
        self._frame_skip = frame_skip
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._flag_shape = (num_envs, 1)
        self._make_specs()

    # ------------------------------------------------------------------------------ construction
    @property
    def env(self) -> Any:
        """The wrapped envpool pool (a new one after each ``set_seed``)."""
        return self._env

    @property
    def num_workers(self) -> int:
        """The number of sub-envs stepped together (the env's batch size)."""
        return int(self.batch_size[0])

    @property
    def frame_skip(self) -> int:
        """How many times each action is repeated."""
        return self._frame_skip

    def _make_specs(self) -> None:
        gym = import_gymnasium()
        env, device, batch = self._env, self.device, self.batch_size
        # envpool builds (and caches) its spaces on first access, which warns: see _quietly
        obs_space = _quietly(lambda: env.single_observation_space)
        act_space = _quietly(lambda: env.single_action_space)
        for what, space in (("observation", obs_space), ("action", act_space)):
            if not isinstance(space, gym.spaces.Space):
                raise NotImplementedError(
                    f"MultiThreadedEnvWrapper: the pool's {what} space is {space!r}, not a "
                    f"gymnasium space (multi-player envs are not supported)"
                )
        obs_space = _sane_bounds(obs_space)
        observation = gym_to_torchrl_spec_transform(obs_space, device, self._categorical, batch)
        read = make_reader(obs_space, self._categorical)
        if isinstance(observation, Composite) and isinstance(obs_space, gym.spaces.Dict):
            entries: dict[NestedKey, Any] = {key: observation[key] for key in observation.keys()}
            clash = sorted(_RESERVED.intersection(entries))
            if clash:
                raise ValueError(
                    f"MultiThreadedEnvWrapper: the Dict observation space has keys {clash} that "
                    f"clash with the env's reserved output keys"
                )
            self._read_obs = read
        else:
            entries = {OBSERVATION: observation}
            self._read_obs = lambda obs: {OBSERVATION: read(obs)}
        self.observation_spec = Composite(entries, shape=batch, device=device)
        action = gym_to_torchrl_spec_transform(act_space, device, self._categorical, batch)
        self.full_action_spec = Composite({ACTION: action}, shape=batch, device=device)
        self.reward_spec = Unbounded(shape=(*batch, 1), device=device, dtype=torch.float32)
        self._write_action = make_writer(act_space, self._categorical, batched=True)
        self._obs_keys = list(entries)

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        old = self._env
        self._env = _rebuild(old, int(seed) % 2**31)
        old.close()

    def _output(self, data: dict[Any, Any]) -> TensorDictBase:
        device = self.device
        if device is None or device.type == "cpu":
            # the tensors were just built on the CPU with the specs' shapes: nothing to check
            return new_unchecked(data, batch_size=self.batch_size, device=device)
        return TensorDict(data, batch_size=self.batch_size, device=device)

    def _in_order(self, ids: np.ndarray, *arrays: Any) -> tuple[Any, ...]:
        # envpool's synchronous mode returns the sub-envs in order; should it not, put them back
        if np.array_equal(ids, self._all_ids):
            return arrays
        order = np.argsort(ids)
        return tuple(_take(a, order) for a in arrays)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = tensordict.get(RESET, None) if tensordict is not None else None
        if tensordict is not None and mask is not None:
            rows = mask.reshape(self.batch_size).cpu()
            rows_np = rows.numpy()
            if not rows_np.all():
                return self._partial_reset(tensordict, rows, rows_np)
        obs, info = self._env.reset()
        (obs,) = self._in_order(info["env_id"], obs)
        data = self._read_obs(obs)
        flags = torch.zeros(self._flag_shape, dtype=torch.bool)
        data[TERMINATED] = flags
        data[TRUNCATED] = flags.clone()
        data[DONE] = flags.clone()
        return self._output(data)

    def _partial_reset(
        self, tensordict: TensorDictBase, rows: torch.Tensor, rows_np: np.ndarray
    ) -> TensorDictBase:
        obs, _ = self._env.reset(self._all_ids[rows_np])  # in the order of the ids
        data = _fill(self._read_obs(obs), tensordict, rows)
        keep = ~rows.unsqueeze(-1)
        for flag in (DONE, TERMINATED, TRUNCATED):
            previous = tensordict.get(flag, None)
            if isinstance(previous, torch.Tensor) and previous.shape == keep.shape:
                data[flag] = previous.cpu() & keep
            else:
                data[flag] = torch.zeros(self._flag_shape, dtype=torch.bool)
        return self._output(data)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._write_action(tensordict.get(ACTION))
        obs, reward, terminated, truncated, info = self._env.step(action)
        obs, reward, terminated, truncated = self._in_order(
            info["env_id"], obs, reward, terminated, truncated
        )
        if self._frame_skip > 1:
            obs, reward, terminated, truncated = self._repeat(
                action, obs, reward, terminated, truncated
            )
        data = self._read_obs(obs)
        shape = self._flag_shape
        data[REWARD] = torch.from_numpy(np.asarray(reward, dtype=np.float32).reshape(shape))
        terminated = np.asarray(terminated, dtype=bool).reshape(shape)
        truncated = np.asarray(truncated, dtype=bool).reshape(shape)
        data[TERMINATED] = torch.from_numpy(terminated)
        data[TRUNCATED] = torch.from_numpy(truncated)
        data[DONE] = torch.from_numpy(terminated | truncated)
        return self._output(data)

    def _repeat(
        self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any
    ) -> tuple[Any, Any, Any, Any]:
        """Steps the sub-envs whose episode goes on ``frame_skip - 1`` more times."""
        total = np.asarray(reward, dtype=np.float32).copy()
        terminated = np.array(terminated, dtype=bool)
        truncated = np.array(truncated, dtype=bool)
        obs = _copy(obs)
        active = ~(terminated | truncated)
        step = self._env.step
        for _ in range(self._frame_skip - 1):
            if not active.any():
                break
            if active.all():
                ids = self._all_ids
                o, r, te, tr, info = step(action)
                o, r, te, tr = self._in_order(info["env_id"], o, r, te, tr)
            else:
                # only the sub-envs still running: stepping a finished one would reset it
                ids = self._all_ids[active]
                o, r, te, tr, _ = step(_take(action, ids), ids)  # in the order of ids
            _put(obs, ids, o)
            total[ids] += r
            terminated[ids] = te
            truncated[ids] = tr
            active[ids] = ~(te | tr)
        return obs, total, terminated, truncated

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        task = type(self._env.spec).__name__.removesuffix("EnvSpec")
        return (
            f"{type(self).__name__}(env={task}, num_workers={self.num_workers}, "
            f"device={self.device})"
        )


def _fill(
    fresh: dict[str, Any], previous: TensorDictBase | None, rows: torch.Tensor
) -> dict[str, Any]:
    """Full-batch entries: ``fresh`` values in ``rows``, ``previous`` ones (or zeros) elsewhere."""
    out: dict[str, Any] = {}
    for key, value in fresh.items():
        old = previous.get(key, None) if previous is not None else None
        if isinstance(value, dict):
            out[key] = _fill(value, old if isinstance(old, TensorDictBase) else None, rows)
            continue
        shape = (rows.shape[0], *value.shape[1:])
        if isinstance(old, torch.Tensor) and old.shape == shape and old.dtype == value.dtype:
            full = old.cpu().clone()
        else:
            full = value.new_zeros(shape)
        full[rows] = value
        out[key] = full
    return out


def _take(value: Any, index: np.ndarray) -> Any:
    """``value[index]`` for an array or a (nested) dict / tuple of arrays."""
    if isinstance(value, dict):
        return {k: _take(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_take(v, index) for v in value)
    return np.asarray(value)[index]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return np.array(value, copy=True)


def _put(target: Any, index: np.ndarray, value: Any) -> None:
    if isinstance(target, dict):
        for k in target:
            _put(target[k], index, value[k])
    else:
        target[index] = value


def _available_envs(cls: type) -> list[str]:
    """The task ids envpool registers (``envpool.list_all_envs()``), sorted."""
    return sorted(_envpool().list_all_envs())


class MultiThreadedEnv(MultiThreadedEnvWrapper):
    """Builds an envpool pool of ``num_workers`` copies of ``env_name`` and wraps it.

    An alternative to :class:`~torchrl.envs.ParallelEnv` for the envs envpool implements (classic
    control, Atari, MuJoCo, ...): the copies run in C++ threads of this process, with no worker
    process. ``MultiThreadedEnv.available_envs`` lists the task ids. See
    :class:`MultiThreadedEnvWrapper` for the data layout.

    Args:
        num_workers: the number of sub-envs stepped together (the env's batch size ``[n]``).
        env_name: an envpool task id, e.g. ``"CartPole-v1"``, ``"Pendulum-v1"``, ``"Pong-v5"``.
        create_env_kwargs: passed to ``envpool.make`` (``seed``, ``num_threads``,
            ``max_episode_steps``, task options, ...).
        categorical_action_encoding: see :class:`MultiThreadedEnvWrapper`.
        disable_env_checker: see :class:`MultiThreadedEnvWrapper`.
        frame_skip: see :class:`MultiThreadedEnvWrapper`.
        device: see :class:`MultiThreadedEnvWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> from torchrl.envs import MultiThreadedEnv, check_env_specs
        >>> env = MultiThreadedEnv(4, "Pendulum-v1", create_env_kwargs={"seed": 0})  # doctest: +SKIP
        >>> check_env_specs(env)  # doctest: +SKIP
        >>> env.rollout(3)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 3, 1])
    """

    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        num_workers: int,
        env_name: str,
        *,
        create_env_kwargs: dict[str, Any] | None = None,
        categorical_action_encoding: bool = False,
        disable_env_checker: bool | None = None,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        envpool = _envpool()
        num_workers = int(num_workers)
        if num_workers < 1:
            raise ValueError(f"MultiThreadedEnv: num_workers must be >= 1, got {num_workers}")
        known = envpool.list_all_envs()
        if env_name not in known:
            close = difflib.get_close_matches(str(env_name), known, n=3)
            hint = f"; did you mean {close}?" if close else ""
            raise ValueError(
                f"MultiThreadedEnv: envpool has no task {env_name!r}{hint} "
                f"(MultiThreadedEnv.available_envs lists them)"
            )
        kwargs = dict(create_env_kwargs or {})
        for name in ("num_envs", "batch_size"):
            if kwargs.get(name, num_workers) != num_workers:
                raise ValueError(
                    f"MultiThreadedEnv: create_env_kwargs[{name!r}]={kwargs[name]} differs from "
                    f"num_workers={num_workers} (only envpool's synchronous mode is supported)"
                )
            kwargs[name] = num_workers
        if kwargs.setdefault("env_type", "gymnasium") not in ("gymnasium", "gym"):
            raise ValueError(
                f"MultiThreadedEnv: env_type must be 'gymnasium' (or 'gym'), got "
                f"{kwargs['env_type']!r}"
            )
        if "seed" in kwargs:
            kwargs["seed"] = int(kwargs["seed"]) % 2**31
        pool = _quietly(envpool.make, env_name, **kwargs)
        super().__init__(
            pool,
            categorical_action_encoding,
            disable_env_checker=disable_env_checker,
            frame_skip=frame_skip,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
        self.create_env_kwargs = dict(create_env_kwargs or {})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.env_name}, num_workers={self.num_workers}, "
            f"device={self.device})"
        )
