"""OpenEnv environments behind the torchrl env contract: :class:`OpenEnvWrapper`, :class:`OpenEnvEnv`.

OpenEnv (the ``openenv`` package) serves environments over HTTP/WebSocket: a server runs an
``openenv.core.Environment`` (``reset``/``step`` return an ``Observation`` model carrying
``reward`` and ``done``), and a client (``EnvClient``, or ``GenericEnvClient`` for plain
dicts) returns a ``StepResult`` (``observation``, ``reward``, ``done``). The wrapper takes
either a client or, in-process, the ``Environment`` itself.

Observations and actions are Python objects (pydantic models or dicts). By default they travel
as they are, as non-tensor data under ``"observation"`` and ``"action"``, as in TorchRL. Given
``observation_spec``/``action_spec`` (a :class:`~torchrl.data.Composite` whose keys are field
names of the observation or action), the listed fields become tensors instead: each observation
field is read into a tensor of its spec's shape and dtype, and the action is built from the
action entries (one field each). Only this tensor form runs in
:class:`~torchrl.envs.SerialEnv`/:class:`~torchrl.envs.ParallelEnv` and the collectors, which
move tensors only.

Rewards become float32 ``[1]`` (``None``, which OpenEnv allows, reads as ``0.0``); ``done`` is
a termination (OpenEnv has no truncation flag). ``set_seed(s)`` passes ``seed=s`` to the next
reset (OpenEnv's ``reset(seed=...)``). An OpenEnv env is one instance: run copies in batched envs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Composite, NonTensor, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["OpenEnvEnv", "OpenEnvWrapper"]

_has_openenv = has_module("openenv")


def _openenv() -> Any:
    return import_optional("openenv", extra="openenv")


def _no_envs(cls: type) -> list[str]:
    """OpenEnv finds environments by name on the Hub or among installed packages: none listed."""
    return []


def _example(cls: type | None) -> Any:
    """An instance of a pydantic model class built without validation (spec example data)."""
    if cls is None:
        return None
    construct = getattr(cls, "model_construct", None)
    return construct() if callable(construct) else None


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        if name not in obj:
            raise KeyError(f"OpenEnvWrapper: the observation has no field {name!r} ({list(obj)})")
        return obj[name]
    if not hasattr(obj, name):
        raise KeyError(
            f"OpenEnvWrapper: the observation ({type(obj).__name__}) has no field {name!r}"
        )
    return getattr(obj, name)


def _plain(value: Any) -> Any:
    """Python values of what a TensorDict holds: tensors as numbers/lists, sub-TensorDicts as dicts."""
    if isinstance(value, NonTensorData):
        return value.data
    if isinstance(value, TensorDictBase):
        return {key: _plain(value.get(key)) for key in value.keys()}
    if isinstance(value, torch.Tensor):
        return value.cpu().tolist()
    return value


def _leaf_names(spec: Composite | None, what: str) -> list[str]:
    if spec is None:
        return []
    if not isinstance(spec, Composite):
        raise TypeError(f"OpenEnvWrapper: {what} must be a Composite, got {type(spec).__name__}")
    names = list(spec.keys())
    for name in names:
        if not isinstance(name, str) or isinstance(spec[name], Composite):
            raise ValueError(
                f"OpenEnvWrapper: {what} must map field names (strings) to leaf specs, got "
                f"{name!r}: {spec[name]!r}"
            )
    return names


class OpenEnvWrapper(EnvBase):
    """Wraps an OpenEnv client (or an in-process ``openenv.core.Environment``) as a torchrl env.

    By default ``"observation"`` holds OpenEnv's observation object and ``"action"`` takes any
    action object (a dict is turned into ``action_cls(**dict)`` when ``action_cls`` is given),
    both as non-tensor data. With ``observation_spec``/``action_spec`` (keys are field names,
    leaves unbatched), those fields are tensors instead and the env runs in batched envs and
    collectors. Rewards are float32 ``[1]``, ``done``/``terminated`` bool ``[1]`` (``done`` is a
    termination), ``truncated`` always false. ``set_seed`` seeds the next reset. See
    ``docs/simulators.rst``.

    Args:
        env: a sync client (``SyncEnvClient``), an async ``EnvClient`` (made sync with its
            ``sync()`` when ``sync=True``), or an ``openenv.core.Environment`` instance.
        action_cls: the action model; dict actions are built into it.
        observation_cls: the observation model (example data of the non-tensor spec only).
        return_observation_dict: store observation models as dicts (``model_dump()``).
        sync: call ``env.sync()`` on an async client.
        observation_spec: tensor fields of the observation, e.g.
            ``Composite(hint=Unbounded(shape=(), dtype=torch.int64))``.
        action_spec: tensor fields of the action, e.g.
            ``Composite(guess=Categorical(10))``; the action is ``{field: value}``.
        device: where the env's tensors live.
        batch_size: must be empty (one OpenEnv instance); run copies in a batched env.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check tensor actions against the action spec.

    Examples:
        >>> from openenv.core import GenericEnvClient  # doctest: +SKIP
        >>> from torchrl.envs.libs.openenv import OpenEnvWrapper
        >>> client = GenericEnvClient(base_url="http://127.0.0.1:8000")  # doctest: +SKIP
        >>> env = OpenEnvWrapper(client)  # doctest: +SKIP
        >>> td = env.reset()  # doctest: +SKIP
        >>> td["action"] = {"message": "hi"}  # doctest: +SKIP
        >>> env.step(td)["next", "reward"]  # doctest: +SKIP
    """

    available_envs = ClassProperty(_no_envs)

    def __init__(
        self,
        env: Any = None,
        *,
        action_cls: type | None = None,
        observation_cls: type | None = None,
        return_observation_dict: bool = False,
        sync: bool = True,
        observation_spec: Composite | None = None,
        action_spec: Composite | None = None,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        if env is None:
            raise TypeError("OpenEnvWrapper: env is required (an OpenEnv client or Environment)")
        core = _openenv().core
        super().__init__(
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        if len(self.batch_size):
            raise ValueError(
                f"OpenEnvWrapper: an OpenEnv env is one instance, so batch_size must be empty, "
                f"got {list(self.batch_size)}; run copies in a SerialEnv/ParallelEnv"
            )
        self._in_process = isinstance(env, core.Environment)
        if not self._in_process and sync and callable(getattr(env, "sync", None)):
            env = env.sync()
        self._env = env
        self._action_cls = action_cls
        self._observation_cls = observation_cls
        self._return_observation_dict = bool(return_observation_dict)
        self._observation_fields = _leaf_names(observation_spec, "observation_spec")
        self._action_fields = _leaf_names(action_spec, "action_spec")
        self._seed: int | None = None
        self._warned_none_reward = False
        self._make_specs(observation_spec, action_spec)

    @property
    def env(self) -> Any:
        """The wrapped OpenEnv client or environment."""
        return self._env

    def _make_specs(
        self, observation_spec: Composite | None, action_spec: Composite | None
    ) -> None:
        device = self.device

        def fields(spec: Composite) -> dict[NestedKey, TensorSpec]:
            return {name: spec[name].clone().to(device) for name in spec.keys()}

        if observation_spec is None:
            obs: dict[NestedKey, TensorSpec] = {
                OBSERVATION: NonTensor(device=device, example_data=_example(self._observation_cls))
            }
        else:
            obs = fields(observation_spec)
        if action_spec is None:
            act: dict[NestedKey, TensorSpec] = {
                ACTION: NonTensor(device=device, example_data=_example(self._action_cls))
            }
        else:
            act = fields(action_spec)
        self.observation_spec = Composite(obs, device=device)
        self.full_action_spec = Composite(act, device=device)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=device)

    # -- conversions -----------------------------------------------------------------------------
    def _observation_entries(self, observation: Any) -> dict[str, Any]:
        if not self._observation_fields:
            if self._return_observation_dict and callable(getattr(observation, "model_dump", None)):
                observation = observation.model_dump()
            return {OBSERVATION: NonTensorData(observation, batch_size=[], device=self.device)}
        spec = self.observation_spec
        out = {}
        for name in self._observation_fields:
            leaf = spec[name]
            value = torch.as_tensor(_field(observation, name), dtype=leaf.dtype)
            out[name] = value.reshape(leaf.shape).to(self.device)
        return out

    def _action(self, tensordict: TensorDictBase) -> Any:
        if self._action_fields:
            action: Any = {name: _plain(tensordict.get(name)) for name in self._action_fields}
        else:
            # a dict written into a TensorDict becomes a sub-TensorDict of tensors
            action = _plain(tensordict.get(ACTION))
        if self._action_cls is not None and isinstance(action, Mapping):
            action = self._action_cls(**action)
        return action

    def _output(self, result: Any) -> TensorDictBase:
        # a client returns a StepResult(observation, reward, done); an Environment returns the
        # Observation model itself, which carries reward and done
        observation = result if self._in_process else result.observation
        reward = result.reward
        if reward is None:
            reward = 0.0
        done = torch.tensor([bool(result.done)], device=self.device)
        data = self._observation_entries(observation)
        data[REWARD] = torch.tensor([float(reward)], dtype=torch.float32, device=self.device)
        data[DONE] = done
        data[TERMINATED] = done.clone()
        data[TRUNCATED] = torch.zeros_like(done)
        return TensorDict(data, batch_size=[], device=self.device)

    # -- EnvBase ---------------------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        if self._seed is not None:
            kwargs = {"seed": self._seed, **kwargs}
            self._seed = None
        out = self._output(self._env.reset(**kwargs))
        out.exclude(REWARD, inplace=True)
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        result = self._env.step(self._action(tensordict))
        if result.reward is None and not self._warned_none_reward:
            self._warned_none_reward = True
            warnings.warn(
                "OpenEnvWrapper: the env returned reward=None; it is recorded as 0.0",
                stacklevel=2,
            )
        return self._output(result)

    def _set_seed(self, seed: int | None) -> None:
        self._seed = None if seed is None else int(seed)

    def _close(self) -> None:
        close = getattr(self._env, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        kind = "Environment" if self._in_process else "client"
        return f"{type(self).__name__}({kind}={type(self._env).__name__}, device={self.device})"


class OpenEnvEnv(OpenEnvWrapper):
    """Builds an OpenEnv client by name (``openenv.AutoEnv.from_env``) and wraps it.

    ``AutoEnv.from_env`` finds the env among installed ``openenv-*`` packages or on the Hugging
    Face Hub, and connects to ``base_url`` or starts a Docker container; pass
    ``env_kwargs={"base_url": url, "skip_install": True}`` to reach a running server without
    installing anything (a ``GenericEnvClient`` of plain dicts). With ``auto_action``, the
    action model comes from ``openenv.AutoAction.from_env`` (a warning, and actions pass
    through as given, when it cannot be found).

    Args:
        env_name: the OpenEnv name or Hub repo id (e.g. ``"echo-env"``).
        auto_action: look the action model up with ``AutoAction`` (when ``action_cls`` is None).
        env_kwargs: keyword arguments of ``AutoEnv.from_env`` (``base_url``, ``skip_install``,
            ``docker_image``...).
        **kwargs: the keyword arguments of :class:`OpenEnvWrapper`.

    Examples:
        >>> from torchrl.envs.libs.openenv import OpenEnvEnv
        >>> env = OpenEnvEnv("echo-env", auto_action=False,  # doctest: +SKIP
        ...     env_kwargs={"base_url": "http://127.0.0.1:8000", "skip_install": True})
        >>> env.reset()["observation"]  # doctest: +SKIP
    """

    def __init__(
        self,
        env_name: str,
        *,
        auto_action: bool = True,
        env_kwargs: dict[str, Any] | None = None,
        action_cls: type | None = None,
        **kwargs: Any,
    ) -> None:
        openenv = _openenv()
        env = openenv.AutoEnv.from_env(env_name, **(env_kwargs or {}))
        if auto_action and action_cls is None:
            try:
                action_cls = openenv.AutoAction.from_env(env_name)
            except Exception as err:  # a lookup failure leaves actions as given, loudly
                warnings.warn(
                    f"OpenEnvEnv: no action class found for {env_name!r} ({err!r}); actions "
                    "are passed to the env as given",
                    stacklevel=2,
                )
        super().__init__(env, action_cls=action_cls, **kwargs)
        self.env_name = env_name
