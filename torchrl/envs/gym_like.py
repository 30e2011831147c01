"""Envs with a gym-like ``reset()``/``step()`` API: :class:`GymLikeEnv` and the ``info`` readers.

:class:`GymLikeEnv` turns any object whose ``reset()`` returns an observation (or
``(observation, info)``) and whose ``step(action)`` returns ``(obs, reward, terminated,
truncated, info)`` (or the older ``(obs, reward, done, info)``) into a torchrl env. What is read
and how is spread over small hooks a subclass may override: :meth:`GymLikeEnv.read_action`,
:meth:`~GymLikeEnv.read_obs`, :meth:`~GymLikeEnv.read_reward`, :meth:`~GymLikeEnv.read_done` and
:meth:`~GymLikeEnv.read_info` (which runs the ``info`` readers defined here).

The gymnasium wrapper (:class:`~torchrl.envs.GymWrapper`) does not go through these hooks: it
builds its converters once from the spaces and steps without per-step dispatch (see
``torchrl/envs/libs/gym.py``); it shares the ``info`` readers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, NEXT, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl.data.specs import Composite, OneHot, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase

__all__ = ["BaseInfoDictReader", "GymLikeEnv", "default_info_dict_reader"]

_RESERVED_KEYS = frozenset({ACTION, REWARD, DONE, TERMINATED, TRUNCATED, RESET, NEXT})


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


class BaseInfoDictReader:
    """Interface of the objects that copy entries of gymnasium's ``info`` dict into a TensorDict.

    A reader is called after every reset and step as ``reader(info, tensordict)`` and returns the
    TensorDict with its entries written; :attr:`info_spec` describes those entries, with the env's
    batch dimensions first. Subclasses implement both.

    Examples:
        >>> from torchrl.envs.gym_like import BaseInfoDictReader, default_info_dict_reader
        >>> isinstance(default_info_dict_reader(["x"]), BaseInfoDictReader)
        True
    """

    def __call__(self, info_dict: dict[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    @property
    def info_spec(self) -> Composite:
        raise NotImplementedError

    def bind(
        self,
        sample_infos: Callable[[], list[dict[str, Any]]],
        batch_size: torch.Size,
        device: DeviceLike,
    ) -> None:
        """Called once by the env the reader is declared on, before :attr:`info_spec` is read.

        A reader whose specs depend on the env completes them here (the default does nothing).

        Args:
            sample_infos: resets and steps the wrapped env once and returns the two ``info``
                dicts (call it only when real values are needed: it costs an episode start).
            batch_size: the env's batch size, to put in front of every spec.
            device: the env's device.
        """


class default_info_dict_reader(BaseInfoDictReader):  # noqa: N801 (TorchRL's public name)
    """Reads numeric entries of gymnasium's ``info`` dict into the env's output.

    Declare the reader on an env with :meth:`GymLikeEnv.set_info_dict_reader` (or
    :meth:`~torchrl.envs.GymWrapper.set_info_dict_reader`); its entries then
    appear in every reset and step output and in the env's ``observation_spec``. An entry missing
    from an ``info`` dict (typically at reset) is written as zeros.

    Args:
        keys: the ``info`` keys to read; ``None`` reads every numeric key the env reports at its
            first reset and step (private keys, starting with ``"_"``, excluded when
            ``ignore_private``).
        spec: the specs of the entries: a list matched to ``keys``, a dict or a
            :class:`~torchrl.data.Composite`. A spec's shape may or may not include the env's batch
            dimensions. Missing specs are inferred as :class:`~torchrl.data.Unbounded` from the
            values the env reports (their numpy dtype is kept).
        ignore_private: skip keys starting with ``"_"`` when ``keys`` is ``None`` (gymnasium's
            vector envs report a ``"_key"`` mask beside each ``"key"``).

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.envs.gym_like import default_info_dict_reader
        >>> from torchrl.data import Unbounded
        >>> env = GymEnv("CartPole-v1")
        >>> env = env.set_info_dict_reader(default_info_dict_reader(["x"], spec=[Unbounded(())]))
        >>> "x" in env.observation_spec.keys()
        True
    """

    def __init__(
        self,
        keys: Sequence[str] | None = None,
        spec: Sequence[TensorSpec] | dict[str, TensorSpec] | Composite | None = None,
        ignore_private: bool = True,
    ) -> None:
        if isinstance(keys, str):
            keys = [keys]
        self.keys = list(keys) if keys is not None else None
        self.ignore_private = ignore_private
        self._given: dict[str, TensorSpec] = {}
        if spec is not None:
            if isinstance(spec, (Composite, dict)):
                self._given = {key: spec[key] for key in spec.keys()}
                if self.keys is None:
                    self.keys = list(self._given)
            else:
                if self.keys is None or len(self.keys) != len(spec):
                    raise ValueError(
                        f"default_info_dict_reader: a list of specs must match the keys one to "
                        f"one, got keys={self.keys} and {len(spec)} specs"
                    )
                self._given = dict(zip(self.keys, spec))
        self._spec: Composite | None = None
        self._plan: list[tuple[str, np.dtype, torch.Size, torch.Tensor]] = []

    @property
    def info_spec(self) -> Composite:
        """The specs of the entries this reader writes (batch dimensions included)."""
        if self._spec is None:
            raise RuntimeError(
                "default_info_dict_reader: the spec is known once the reader is declared on an "
                "env with env.set_info_dict_reader(reader)"
            )
        return self._spec

    def bind(
        self,
        sample_infos: Callable[[], list[dict[str, Any]]],
        batch_size: torch.Size,
        device: DeviceLike,
    ) -> None:
        batch = tuple(batch_size)
        keys = self.keys
        complete = keys is not None and all(key in self._given for key in keys)
        # the env is only touched when some spec has to be inferred from real values
        samples = [] if complete else sample_infos()
        if keys is None:
            keys = []
            for info in samples:
                for key, value in info.items():
                    if key in keys or (self.ignore_private and key.startswith("_")):
                        continue
                    try:
                        numeric = np.asarray(value).dtype.kind in "biuf"
                    except ValueError:  # ragged sequences
                        numeric = False
                    if numeric:
                        keys.append(key)
        specs: dict[Any, TensorSpec] = {}
        for key in keys:
            if key in _RESERVED_KEYS:
                raise ValueError(f"info key {key!r} clashes with a reserved key of the env output")
            spec = self._given.get(key)
            if spec is None:
                value = next((info[key] for info in samples if key in info), None)
                if value is None:
                    raise ValueError(
                        f"info key {key!r} is reported neither at reset nor at the first step "
                        f"(keys seen: {sorted({k for info in samples for k in info})}); pass "
                        "its spec to default_info_dict_reader(keys, spec=...)"
                    )
                array = np.asarray(value)
                if array.dtype.kind not in "biuf":
                    raise TypeError(
                        f"info key {key!r} holds {type(value).__name__} values of numpy dtype "
                        f"{array.dtype}; only numeric entries can be read into tensors"
                    )
                shape = array.shape if array.shape[: len(batch)] == batch else batch + array.shape
                spec = Unbounded(shape=shape, device=device, dtype=_torch_dtype(array.dtype))
            elif tuple(spec.shape[: len(batch)]) != batch:
                spec = spec.expand(*batch, *spec.shape)
            specs[key] = spec.to(device) if device is not None else spec
        self.keys = keys
        self._spec = Composite(specs, shape=batch, device=device)
        self._plan = [
            (key, _numpy_dtype(spec.dtype or torch.float32), spec.shape, spec.zero().cpu())
            for key, spec in specs.items()
        ]

    def __call__(self, info_dict: dict[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the declared entries of ``info_dict`` into ``tensordict`` and returns it."""
        device = tensordict.device
        for key, np_dtype, shape, zero in self._plan:
            value = info_dict.get(key)
            if value is None:
                tensor = zero.clone()
            else:
                tensor = torch.from_numpy(np.asarray(value, dtype=np_dtype)).reshape(shape)
            if device is not None and device.type != "cpu":
                tensor = tensor.to(device)
            tensordict.set(key, tensor)
        return tensordict


def _torch_dtype(np_dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros((), dtype=np_dtype)).dtype


def attach_info_reader(
    env: EnvBase,
    reader: BaseInfoDictReader | None,
    ignore_private: bool,
    sample_infos: Callable[[], list[dict[str, Any]]],
) -> None:
    """Binds ``reader`` (a default reader when ``None``) to ``env``, adds its specs to the env's
    observation spec and appends it to ``env.info_dict_reader``: the common part of
    ``set_info_dict_reader`` for :class:`GymLikeEnv` and the gymnasium wrapper.

    Args:
        env: the env whose ``info`` dicts the reader reads.
        reader: the reader, or ``None`` for a :class:`default_info_dict_reader`.
        ignore_private: for the default reader, skip keys starting with ``"_"``.
        sample_infos: returns a few ``info`` dicts of the env, to infer the specs the reader
            lacks.
    """
    if reader is None:
        reader = default_info_dict_reader(ignore_private=ignore_private)
    reader.bind(sample_infos, env.batch_size, env.device)
    spec = reader.info_spec
    observation = env.full_observation_spec.clone()
    for key in spec.keys(include_nested=True, leaves_only=True):
        if key in observation.keys(include_nested=True):
            raise ValueError(
                f"{type(env).__name__}.set_info_dict_reader: info entry {key!r} clashes "
                f"with an observation of the same name ({observation[key]!r})"
            )
        observation[key] = spec[key]
    env.observation_spec = observation
    readers: list[BaseInfoDictReader] = env.info_dict_reader  # type: ignore[assignment]
    readers.append(reader)


class GymLikeEnv(EnvBase):
    """Base class of the wrappers of envs with a gym-like ``reset()``/``step(action)`` API.

    The wrapped env's ``step(action)`` returns ``(obs, reward, terminated, truncated, info)``
    (gymnasium, gym >= 0.26) or ``(obs, reward, done, info)`` (older gym: ``done`` is read as
    ``terminated``); its ``reset()`` returns ``(obs, info)`` or just ``obs``. A subclass sets
    the specs in :meth:`_make_specs` (``observation_spec`` and ``action_spec`` at least) and may
    override the hooks that turn the env's values into tensors and back:

    * :meth:`read_action`: action tensor -> the env's action;
    * :meth:`read_obs`: observation -> dict of entries (a dict observation keeps its keys,
      anything else goes under ``"observation"``);
    * :meth:`read_reward`, :meth:`read_done`: reward and flags -> tensors of the specs' shapes;
    * :meth:`read_info`: the ``info`` dict -> entries, through the readers declared with
      :meth:`set_info_dict_reader`.

    A batched env (``batch_size=[n]``) resets all its sub-envs at once: a partial reset (a
    ``"_reset"`` mask that is not all ``True``) raises unless a subclass overrides ``_reset``.

    Args:
        env: the object with ``reset()`` and ``step()`` (``render()``, ``close()`` and
            ``seed()`` are used when present).
        frame_skip: repeat each action this many times (stopping at the end of an episode),
            summing the rewards.
        device: the device of the output tensors.
        batch_size: the env's batch size (``[]`` by default).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.

    Examples:
        >>> import numpy as np
        >>> from torchrl.data import Categorical, Unbounded
        >>> from torchrl.envs import GymLikeEnv
        >>> class Countdown:  # a gym-like env: 3 steps, reward 1 each
        ...     def reset(self):
        ...         self.t = 3
        ...         return np.array([self.t], dtype=np.float32), {}
        ...     def step(self, action):
        ...         self.t -= 1
        ...         return np.array([self.t], dtype=np.float32), 1.0, self.t == 0, False, {}
        >>> class CountdownEnv(GymLikeEnv):
        ...     def _make_specs(self, env):
        ...         self.observation_spec = Unbounded(shape=(1,))
        ...         self.action_spec = Categorical(2)
        >>> rollout = CountdownEnv(Countdown()).rollout(10)
        >>> rollout["next", "observation"].squeeze(-1), rollout["next", "done"].squeeze(-1)
        (tensor([2., 1., 0.]), tensor([False, False,  True]))
    """

    def __init__(
        self,
        env: Any,
        *,
        frame_skip: int | None = None,
        device: DeviceLike = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise TypeError(
                    f"{type(self).__name__}: the wrapped env must have a {method}() method; "
                    f"got {type(env).__name__}: {env!r}"
                )
        frame_skip = 1 if frame_skip is None else int(frame_skip)
        if frame_skip < 1:
            raise ValueError(f"{type(self).__name__}: frame_skip must be >= 1, got {frame_skip}")
        super().__init__(
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self._frame_skip = frame_skip
        self._next_seed: int | None = None
        try:
            parameters = inspect.signature(env.reset).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            parameters = {}  # type: ignore[assignment]
        self._reset_takes_seed = "seed" in parameters or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
        )
        self.info_dict_reader: list[BaseInfoDictReader] = []
        self._make_specs(env)

    # ------------------------------------------------------------------------------ construction
    def _make_specs(self, env: Any) -> None:
        """Sets the env's specs from the wrapped ``env`` (subclasses implement it)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement _make_specs(env), setting observation_spec "
            "and action_spec (and reward_spec / done_spec when they differ from the defaults)"
        )

    @property
    def env(self) -> Any:
        """The wrapped env."""
        return self._env

    @property
    def frame_skip(self) -> int:
        """How many times each action is repeated."""
        return self._frame_skip

    # ------------------------------------------------------------------------------------ hooks
    def read_action(self, action: torch.Tensor | TensorDictBase) -> Any:
        """Turns the action read from the input TensorDict into what the env's ``step`` takes.

        One-hot actions become indices (a Python ``int`` for an unbatched env), a 0-d tensor
        becomes a Python number, other tensors numpy arrays and a TensorDict a dict of them.

        Args:
            action: the entry under the env's ``action_key``.

        Returns:
            The action for the wrapped env.
        """
        if isinstance(action, TensorDictBase):
            return {
                key: self.read_action(value)
                if isinstance(value, TensorDictBase)
                else value.detach().cpu().numpy()
                for key, value in action.items()
            }
        value = action.detach().cpu().numpy()
        if isinstance(self.full_action_spec[self.action_key], OneHot):
            value = np.asarray(value.argmax(-1))  # numpy's argmax takes bool one-hot rows
        return value.item() if value.ndim == 0 else value

    def read_obs(self, observations: Any) -> dict[Any, Any]:
        """Turns an observation of the env into the entries of the output.

        A mapping keeps its keys (nested mappings become nested entries); any other value goes
        under ``"observation"``. Values are converted with the dtype of their spec.

        Args:
            observations: the observation the env returned.

        Returns:
            A dict of tensors (nested dicts for nested entries).
        """
        if not isinstance(observations, Mapping):
            observations = {OBSERVATION: observations}
        return self._read_entries(observations, self.full_observation_spec, ())

    def _read_entries(
        self, values: Mapping[Any, Any], spec: Composite, prefix: tuple[str, ...]
    ) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, value in values.items():
            sub = spec.get(key) if key in spec.keys() else None
            if isinstance(value, Mapping):
                if sub is not None and not isinstance(sub, Composite):
                    raise ValueError(
                        f"{type(self).__name__}: observation {(*prefix, key)} is a dict but "
                        f"its spec is {type(sub).__name__}"
                    )
                out[key] = self._read_entries(value, sub or Composite(), (*prefix, key))
                continue
            if sub is None:
                raise KeyError(
                    f"{type(self).__name__}: the env returned an observation "
                    f"{(*prefix, key) if prefix else key!r} that observation_spec does not have "
                    f"(its keys: {list(spec.keys())})"
                )
            out[key] = torch.as_tensor(np.asarray(value), dtype=sub.dtype)
        return out

    def read_reward(self, reward: Any) -> torch.Tensor:
        """Turns the env's reward into a tensor of the reward spec's dtype and shape.

        Args:
            reward: a number or an array (one per sub-env for a batched env).

        Returns:
            The reward tensor.
        """
        spec = self.full_reward_spec[self.reward_key]
        return torch.as_tensor(np.asarray(reward), dtype=spec.dtype).reshape(spec.shape)

    def read_done(
        self,
        terminated: Any = None,
        truncated: Any = None,
        done: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
        """Turns the env's end-of-episode flags into bool tensors of the done spec's shape.

        Missing flags are completed: ``done = terminated | truncated``; an env that only reports
        ``done`` (the older gym API) has ``terminated = done`` and ``truncated = False``.

        Args:
            terminated: the episode reached a terminal state.
            truncated: the episode was cut short (e.g. a time limit).
            done: either of them.

        Returns:
            ``(terminated, truncated, done, do_break)``: the three flags as tensors and whether
            a repeated action (``frame_skip``) must stop.
        """
        shape = self.full_done_spec[DONE].shape

        def flag(value: Any) -> torch.Tensor:
            return torch.as_tensor(np.asarray(value, dtype=bool)).reshape(shape)

        if terminated is None and truncated is None:
            if done is None:
                raise ValueError(f"{type(self).__name__}.read_done: no flag was given")
            terminated = done
        term = flag(terminated)
        trunc = flag(truncated) if truncated is not None else torch.zeros(shape, dtype=torch.bool)
        done_t = flag(done) if done is not None else term | trunc
        return term, trunc, done_t, bool(done_t.any())

    def read_info(self, info_dict: Mapping[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the entries of the env's ``info`` dict that the declared readers read.

        Args:
            info_dict: the ``info`` the env returned (empty when it returned none).
            tensordict: the output being built.

        Returns:
            The output with the readers' entries.
        """
        for reader in self.info_dict_reader:
            tensordict = reader(dict(info_dict), tensordict)
        return tensordict

    # ----------------------------------------------------------------------------- info readers
    def set_info_dict_reader(
        self, info_dict_reader: BaseInfoDictReader | None = None, ignore_private: bool = True
    ) -> GymLikeEnv:
        """Declares a reader of the env's ``info`` dict; its entries join every output.

        The reader's specs are added to ``observation_spec``; specs it lacks are inferred from
        one reset and one step (with the zero action) of the wrapped env.

        Args:
            info_dict_reader: the reader; a :class:`default_info_dict_reader` reading every
                numeric key when ``None``.
            ignore_private: for the default reader, skip keys starting with ``"_"``.

        Returns:
            The env itself.
        """
        attach_info_reader(self, info_dict_reader, ignore_private, self._sample_infos)
        return self

    def auto_register_info_dict(
        self, ignore_private: bool = True, info_dict_reader: BaseInfoDictReader | None = None
    ) -> GymLikeEnv:
        """Reads every numeric entry of the ``info`` dict (or what ``info_dict_reader`` reads).

        Args:
            ignore_private: skip keys starting with ``"_"``.
            info_dict_reader: a reader to use instead of the default one.

        Returns:
            The env itself.
        """
        return self.set_info_dict_reader(info_dict_reader, ignore_private=ignore_private)

    def _sample_infos(self) -> list[dict[str, Any]]:
        _, reset_info = self._split_reset(self._env.reset())
        action = self.read_action(self.full_action_spec[self.action_key].zero())
        step_info = self._split_step(self._env.step(action))[-1]
        self._env.reset()
        return [dict(reset_info), dict(step_info)]

    # ---------------------------------------------------------------------------- reset / step
    def _split_reset(self, out: Any) -> tuple[Any, Mapping[str, Any]]:
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping):
            return out[0], out[1]
        return out, {}

    def _split_step(self, out: Any) -> tuple[Any, Any, Any, Any, Any, Mapping[str, Any]]:
        """``(obs, reward, terminated, truncated, done, info)`` from either step API."""
        if not isinstance(out, tuple) or len(out) not in (4, 5):
            length = len(out) if isinstance(out, tuple) else type(out).__name__
            raise ValueError(
                f"{type(self).__name__}: the wrapped env's step() must return (obs, reward, "
                f"terminated, truncated, info) or (obs, reward, done, info); got {length}"
            )
        if len(out) == 5:
            obs, reward, terminated, truncated, info = out
            return obs, reward, terminated, truncated, None, info
        obs, reward, done, info = out
        return obs, reward, None, None, done, info

    def _build(self, data: dict[Any, Any], info: Mapping[str, Any]) -> TensorDictBase:
        out = TensorDict(data, batch_size=self.batch_size, device=self.device)
        return self.read_info(info, out)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = tensordict.get(RESET, None) if tensordict is not None else None
        if mask is not None and not bool(mask.all()):
            # a gym-like reset() resets every sub-env: merging only the masked ones would leave
            # the others' data out of step with the wrapped env
            raise NotImplementedError(
                f"{type(self).__name__}: the wrapped env's reset() resets all its sub-envs, so "
                f"a partial reset ('_reset' mask {mask.reshape(-1).tolist()}) cannot be done; "
                "override _reset to reset only the masked sub-envs"
            )
        seed = self._next_seed
        if seed is not None:
            self._next_seed = None
            if self._reset_takes_seed:
                kwargs["seed"] = seed
        obs, info = self._split_reset(self._env.reset(**kwargs))
        data = self.read_obs(obs)
        shape = self.full_done_spec[DONE].shape
        for key in (TERMINATED, TRUNCATED, DONE):
            data[key] = torch.zeros(shape, dtype=torch.bool)
        return self._build(data, info)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self.read_action(tensordict.get(self.action_key))
        total: torch.Tensor | None = None
        for _ in range(self._frame_skip):
            obs, reward, terminated, truncated, done, info = self._split_step(
                self._env.step(action)
            )
            reward_t = self.read_reward(reward)
            total = reward_t if total is None else total + reward_t
            term, trunc, done_t, do_break = self.read_done(terminated, truncated, done)
            if do_break:
                break
        data = self.read_obs(obs)
        data[REWARD] = total
        data[TERMINATED], data[TRUNCATED], data[DONE] = term, trunc, done_t
        return self._build(data, info)

    def _set_seed(self, seed: int | None) -> None:
        if self._reset_takes_seed:
            self._next_seed = seed  # used by the next reset, as gymnasium seeds envs
        elif callable(getattr(self._env, "seed", None)):
            self._env.seed(seed)

    def render(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped env's ``render`` and returns what it returns.

        Args:
            *args: passed to ``render``.
            **kwargs: passed to ``render``.

        Returns:
            The wrapped env's frame (or whatever its ``render`` returns).
        """
        render = getattr(self._env, "render", None)
        if render is None:
            raise AttributeError(f"{type(self).__name__}: the wrapped env has no render() method")
        return render(*args, **kwargs)

    def _close(self) -> None:
        close = getattr(self._env, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, "
            f"batch_size={self.batch_size}, device={self.device})"
        )
