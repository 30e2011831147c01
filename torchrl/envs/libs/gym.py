"""gymnasium environments behind the torchrl env contract: :class:`GymWrapper` and :class:`GymEnv`.

Everything that depends on the wrapped env's spaces (specs, the functions that turn gymnasium
values into tensors and tensors into gymnasium actions, in ``_gym_spaces.py``) is built once, at
construction, so that a step does one ``env.step`` call, a few ``torch.from_numpy`` calls and
builds one TensorDict.

Conventions (see ``DESIGN.md`` §2-3):

* A ``Box`` (or any non-``Dict``) observation goes under ``"observation"``; a ``Dict`` observation
  maps its keys (nested ``Dict`` spaces become nested entries); a ``Tuple`` space becomes a
  :class:`~torchrl.data.Composite` with keys ``"0"``, ``"1"``, ... (its members may differ in shape
  and dtype, so they are never stacked).
* ``Discrete``/``MultiDiscrete`` values are 0-based indices in torchrl (a space's ``start`` is
  added back before the value reaches gymnasium), one-hot encoded unless
  ``categorical_action_encoding=True``; the flag applies to observations as well as actions.
* A ``Box`` maps to :class:`~torchrl.data.Bounded`, or to :class:`~torchrl.data.Unbounded` when
  all its bounds are infinite.
* A ``Text`` space (or any space with a string dtype, such as Minigrid's ``MissionSpace``) maps
  to :class:`~torchrl.data.NonTensor`: its strings are stored as they come, as ``NonTensorData``
  (a ``NonTensorStack`` of strings for a vector env).
* Observations keep the space's dtype (a float64 ``Box`` stays float64); rewards are float32 and
  done flags bool, both with a trailing dimension of 1.
* Vector envs run with gymnasium's ``AutoresetMode.DISABLED``: the step that ends an episode
  returns the true last observation with ``done=True``, and the ``"_reset"`` mask of the next
  reset resets exactly those sub-envs (``reset(options={"reset_mask": ...})``).
* Backends: :class:`GymEnv` builds its env with the package chosen by :class:`set_gym_backend`
  (gymnasium by default, or the legacy ``gym`` 0.26, single envs only), and
  :class:`GymWrapper` converts the spaces of the package that built the env it wraps.
  :func:`register_gym_spec_conversion` adds conversions for other space types.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import (
    ACTION,
    DONE,
    NEXT,
    OBSERVATION,
    PIXELS,
    RESET,
    REWARD,
    TERMINATED,
    TRUNCATED,
)
from torchrl._td_compat import entries, new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs._action_checks import make_action_check
from torchrl.envs.common import EnvBase
from torchrl.envs.gym_like import (
    BaseInfoDictReader,
    attach_info_reader,
    default_info_dict_reader,
)
from torchrl.envs.libs._gym_batched import GymBatchStepper
from torchrl.envs.libs._gym_spaces import (
    INVALID,
    ToTensor,
    backend_of,
    gym_backend,
    gym_to_torchrl_spec_transform,
    has_spec_conversion,
    make_checked_writer,
    make_reader,
    make_writer,
    raise_if_bad_action,
    register_gym_spec_conversion,
    set_gym_backend,
    spaces_of,
    tensor_from_array,
)

__all__ = [
    "BaseInfoDictReader",
    "GymEnv",
    "GymWrapper",
    "default_info_dict_reader",
    "gym_backend",
    "gym_to_torchrl_spec_transform",
    "register_ale_envs",
    "register_gym_spec_conversion",
    "set_gym_backend",
]

_has_gym = has_module("gymnasium")

_RESERVED_KEYS = frozenset({ACTION, REWARD, DONE, TERMINATED, TRUNCATED, RESET, NEXT})

# ------------------------------------------------------------------------------------ the envs


def register_ale_envs() -> None:
    """Registers ``ale-py``'s ``ALE/...`` game ids with gymnasium (later calls do nothing).

    :class:`GymEnv` calls it for any ``ALE/`` id, so ``GymEnv("ALE/Pong-v5")`` works as soon as
    ``ale-py`` is installed (its ROMs ship inside the wheel).

    Raises:
        ImportError: when ``ale-py`` is not installed, naming the extra to install.

    Examples:
        >>> register_ale_envs()  # doctest: +SKIP
        >>> GymEnv("ALE/Pong-v5")  # doctest: +SKIP
        GymEnv(env=ALE/Pong-v5, batch_size=torch.Size([]), device=cpu)
    """
    gymnasium = import_optional("gymnasium", extra="atari")
    if "ALE/Pong-v5" in gymnasium.envs.registry:
        return
    # importing ale_py registers its ids; if it was imported before the ids were removed from
    # the registry, its registration function puts them back
    import_optional("ale_py", extra="atari")
    if "ALE/Pong-v5" not in gymnasium.envs.registry:
        import_optional("ale_py.registration", extra="atari").register_v5_envs()


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


class GymWrapper(EnvBase):
    """Wraps a gymnasium env (or vector env) behind the torchrl env contract.

    Spaces become specs (see the module docstring for the mapping): a ``Box`` observation is
    written under ``"observation"``, ``Dict`` observations keep their keys, ``Tuple`` spaces
    become Composites with keys ``"0"``, ``"1"``, .... Rewards are float32 ``[*B, 1]``, and
    ``done = terminated | truncated`` (bool ``[*B, 1]``). A vector env (batch ``[num_envs]``) must
    use ``autoreset_mode=AutoresetMode.DISABLED`` (what :class:`GymEnv` builds): an episode's last
    step then returns its true last observation, and the ``"_reset"`` mask resets the finished
    sub-envs only. Observation arrays are viewed, not copied (``torch.from_numpy``).
    ``env.reset(options={...})`` forwards ``options`` to gymnasium's ``reset``.

    Args:
        env: a ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.
        categorical_action_encoding: encode ``Discrete``/``MultiDiscrete`` values as indices
            (:class:`~torchrl.data.Categorical`) instead of one-hot vectors.
        from_pixels: add ``env.render()`` frames under ``"pixels"`` (uint8 ``[*B, H, W, 3]``);
            the env must have ``render_mode="rgb_array"``.
        pixels_only: with ``from_pixels``, drop the env's own observations.
        frame_skip: repeat each action this many times (stopping at the end of an episode; for
            a vector env, when any sub-env finishes), summing the rewards.
        device: the device of the output tensors.
        batch_size: checked against the env's (``[]``, or ``[num_envs]`` for a vector env).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec before it reaches
            gymnasium (see :class:`~torchrl.envs.EnvBase`; about a microsecond per step).

    Examples:
        >>> import gymnasium as gym
        >>> from torchrl.envs import GymWrapper
        >>> env = GymWrapper(gym.make("Pendulum-v1"))
        >>> env.set_seed(0) and None
        >>> rollout = env.rollout(3)
        >>> rollout["next", "observation"].shape, rollout["next", "reward"].dtype
        (torch.Size([3, 3]), torch.float32)
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
        # the package that built the env (gymnasium, or the legacy gym 0.26 with the same
        # five-value step API), whatever the current gym_backend()
        gym = backend_of(env)
        if isinstance(env, gym.vector.VectorEnv):
            if gym.__name__ != "gymnasium":
                raise NotImplementedError(
                    f"GymWrapper: vector envs of the legacy {gym.__name__} "
                    f"{getattr(gym, '__version__', '')} autoreset sub-envs in a way torchrl "
                    "cannot disable; wrap its envs one by one (SerialEnv/ParallelEnv) or use "
                    "gymnasium's vector envs"
                )
            mode = env.metadata.get("autoreset_mode")
            if mode != gym.vector.AutoresetMode.DISABLED:
                raise ValueError(
                    f"GymWrapper: the vector env {env} uses autoreset_mode={mode}; torchrl needs "
                    "AutoresetMode.DISABLED, so that the step ending an episode returns its last "
                    "observation and only the finished sub-envs are reset (with a '_reset' mask). "
                    "Build it with gymnasium.make_vec(id, num_envs, vectorization_mode='sync', "
                    "vector_kwargs={'autoreset_mode': gymnasium.vector.AutoresetMode.DISABLED}) "
                    "or use GymEnv(id, num_envs=...)"
                )
            env_batch = torch.Size([env.num_envs])
            observation_space = env.single_observation_space
            action_space = env.single_action_space
            vector = True
        elif isinstance(env, gym.Env):
            env_batch = torch.Size([])
            observation_space = env.observation_space
            action_space = env.action_space
            vector = False
        else:
            raise TypeError(
                f"GymWrapper needs a gymnasium.Env or gymnasium.vector.VectorEnv (or a gym "
                f"0.26 Env), got "
                f"{type(env).__name__}: {env!r}"
            )
        if batch_size is not None and torch.Size(batch_size) != env_batch:
            raise ValueError(
                f"GymWrapper: batch_size={list(batch_size)} does not match the env's batch size "
                f"{list(env_batch)} (num_envs of a vector env, [] otherwise)"
            )
        frame_skip = 1 if frame_skip is None else int(frame_skip)
        if frame_skip < 1:
            raise ValueError(f"GymWrapper: frame_skip must be >= 1, got {frame_skip}")
        if from_pixels and getattr(env, "render_mode", None) != "rgb_array":
            raise ValueError(
                f"GymWrapper(from_pixels=True) needs an env made with render_mode='rgb_array', "
                f"got render_mode={getattr(env, 'render_mode', None)!r}"
            )
        super().__init__(
            device=device,
            batch_size=env_batch,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self._vector = vector
        # gymnasium's reset_mask keeps the other sub-envs' data: no merge needed in EnvBase.reset
        # (unless info readers add entries that a partial reset would overwrite).
        self._handles_partial_reset = vector
        self._categorical = bool(categorical_action_encoding)
        self._from_pixels = bool(from_pixels)
        self._pixels_only = bool(from_pixels and pixels_only)
        self._frame_skip = frame_skip
        self._next_seed: int | None = None
        self.info_dict_reader: list[BaseInfoDictReader] = []
        # the writer that checks actions while converting them (see _make_action_check)
        self._checked_write: Callable[[Any], Any] | None = None
        self._make_specs(observation_space, action_space)
        self._make_converters(gym, observation_space, action_space)
        self.empty_cache()  # the action check is chosen once the converters exist

    # ------------------------------------------------------------------------------ construction
    @property
    def env(self) -> Any:
        """The wrapped gymnasium env."""
        return self._env

    @property
    def frame_skip(self) -> int:
        """How many times each action is repeated."""
        return self._frame_skip

    def _make_specs(self, observation_space: Any, action_space: Any) -> None:
        spaces = spaces_of(observation_space)
        device, batch = self.device, self.batch_size
        observation = gym_to_torchrl_spec_transform(
            observation_space, device, self._categorical, batch
        )
        if self._pixels_only:
            entries: dict[Any, TensorSpec] = {}
        elif isinstance(observation, Composite) and isinstance(observation_space, spaces.Dict):
            entries = {key: observation[key] for key in observation.keys()}
            reserved = _RESERVED_KEYS | {PIXELS} if self._from_pixels else _RESERVED_KEYS
            clash = sorted(reserved.intersection(entries))
            if clash:
                raise ValueError(
                    f"GymWrapper: the Dict observation space has keys {clash} that clash with "
                    f"the env's reserved output keys; rename them with a gymnasium wrapper"
                )
        else:
            entries = {OBSERVATION: observation}
        if self._from_pixels:
            entries[PIXELS] = self._pixels_spec()
        self.observation_spec = Composite(entries, shape=batch, device=device)
        # outputs without nested entries skip the constructor's search for nested dicts
        self._nested_output = any(type(k) is not str for k in self.observation_keys)
        # Dict/Tuple actions nest under "action" so that the action stays one entry
        action = gym_to_torchrl_spec_transform(action_space, device, self._categorical, batch)
        self.full_action_spec = Composite({ACTION: action}, shape=batch, device=device)
        self.reward_spec = Unbounded(shape=(*batch, 1), device=device, dtype=torch.float32)

    def _pixels_spec(self) -> TensorSpec:
        # the frame size is only known from a frame: render one after a throwaway reset
        self._env.reset()
        frame = self._render()
        return Bounded(
            low=0,
            high=255,
            shape=tuple(frame.shape),
            device=self.device,
            dtype=torch.uint8,
        )

    def _make_converters(self, gym: Any, observation_space: Any, action_space: Any) -> None:
        categorical = self._categorical
        if self._pixels_only:
            self._read_obs: ToTensor = lambda obs: {}
        elif isinstance(observation_space, spaces_of(observation_space).Dict):
            self._read_obs = make_reader(observation_space, categorical)
        else:
            read = make_reader(observation_space, categorical)
            self._read_obs = lambda obs: {OBSERVATION: read(obs)}
        if self._vector and getattr(self._env.unwrapped, "copy", True) is False:
            # a vector env made with copy=False rewrites one observation buffer at every step,
            # which the zero-copy tensors of earlier steps would keep pointing to
            read_view = self._read_obs
            self._read_obs = lambda obs: read_view(copy.deepcopy(obs))
        self._write_action = make_writer(action_space, categorical, self._vector)
        self._flag_shape = (*self.batch_size, 1)

    def render(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped env's ``render`` and returns what it returns (e.g. an RGB frame).

        Args:
            *args: passed to ``render``.
            **kwargs: passed to ``render``.

        Returns:
            What the gymnasium env's ``render`` returns (``None`` before the first reset for
            many envs; a list of frames, one per sub-env, for some vector envs).
        """
        return self._env.render(*args, **kwargs)

    def _render(self) -> torch.Tensor:
        frame = self._env.render()
        if self._vector:
            frame = np.stack(frame)
        return tensor_from_array(np.asarray(frame, dtype=np.uint8))

    # ----------------------------------------------------------------------------- info readers
    def set_info_dict_reader(
        self, info_dict_reader: BaseInfoDictReader | None = None, ignore_private: bool = True
    ) -> GymWrapper:
        """Declares a reader of gymnasium's ``info`` dict; its entries join every output.

        The reader's specs are added to ``observation_spec``. Specs the reader lacks are inferred
        from one reset and one step of the gymnasium env, after which the env needs a reset.

        Args:
            info_dict_reader: the reader; a :class:`default_info_dict_reader` reading every
                numeric key when ``None``.
            ignore_private: for the default reader, skip keys starting with ``"_"``.

        Returns:
            The env itself.

        Examples:
            >>> from torchrl.data import Unbounded
            >>> from torchrl.envs import GymEnv
            >>> from torchrl.envs.libs.gym import default_info_dict_reader
            >>> reader = default_info_dict_reader(["x"], spec=[Unbounded(())])
            >>> env = GymEnv("CartPole-v1").set_info_dict_reader(reader)
            >>> env.reset()["x"]  # CartPole reports no "x": zeros
            tensor(0.)
        """
        attach_info_reader(self, info_dict_reader, ignore_private, self._sample_infos)
        self._handles_partial_reset = False
        return self

    def _sample_infos(self) -> list[dict[str, Any]]:
        # infos at reset often lack the keys reported at each step: sample both, with a fixed
        # valid action so that no random generator the user seeded is consumed
        _, reset_info = self._env.reset()
        spec = self.full_action_spec[ACTION]
        action = spec.project(spec.zero())
        step_info = self._env.step(self._write_action(action))[-1]
        self._env.reset()
        return [reset_info, step_info]

    # --------------------------------------------------------------------------------- the steps
    def _make_action_check(self, action_keys: list[Any]) -> Callable[[TensorDictBase], None] | None:
        # A single env with a Discrete or small Box action space checks its actions in _step,
        # while converting them (one tolist() for both); other envs get the generic check.
        checked = None
        spec = self.full_action_spec
        if not self._vector and "_write_action" in self.__dict__ and ACTION in spec.keys():
            checked = make_checked_writer(self._env.action_space, self._categorical, spec[ACTION])
        self._checked_write = checked
        return None if checked is not None else super()._make_action_check(action_keys)

    def _check_action_slowly(self, tensordict: TensorDictBase) -> None:
        """The generic check, for an action the checked writer could not vouch for."""
        spec = self.full_action_spec
        check = make_action_check(type(self).__name__, spec, [ACTION], len(self.batch_size))
        if check is not None:
            check(tensordict)

    def _set_seed(self, seed: int | None) -> None:
        # gymnasium seeds an env through its next reset; the spaces have their own generators
        self._next_seed = seed
        self._env.action_space.seed(seed)
        self._env.observation_space.seed(seed)

    def _output(self, data: dict[Any, Any], info: dict[str, Any]) -> TensorDictBase:
        if self._from_pixels:
            data[PIXELS] = self._render()
        device = self.device  # read at each call: env.to(device) may have changed it
        if device is None or device.type == "cpu":
            # new_unchecked skips the checks and device moves of the TensorDict constructor: the
            # data was just built on the CPU with the specs' shapes, so there is nothing to check
            out = new_unchecked(
                data, batch_size=self.batch_size, device=device, nested=self._nested_output
            )
        else:
            out = TensorDict(data, batch_size=self.batch_size, device=device)
        for reader in self.info_dict_reader:
            out = reader(info, out)
        return out

    def _reset_gym(self, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Resets the gymnasium env with the seed given by ``set_seed``, if any (used once)."""
        seed = self._next_seed
        if seed is not None:  # nn.Module's attribute assignment is slow: only when needed
            self._next_seed = None
        return self._env.reset(seed=seed, options=options)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        options = kwargs.get("options")
        if self._vector and tensordict is not None:
            reset = tensordict.get(RESET, None)
            if reset is not None:
                mask = reset.reshape(self.batch_size).cpu().numpy()
                if not mask.all():
                    # gymnasium resets only these sub-envs and returns the others' current data
                    options = dict(options or {}, reset_mask=mask.copy())
        obs, info = self._reset_gym(options)
        data = self._read_obs(obs)
        flags = torch.zeros(self._flag_shape, dtype=torch.bool)
        data[TERMINATED] = flags
        data[TRUNCATED] = flags.clone()
        data[DONE] = flags.clone()
        return self._output(data, info)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raw = entries(tensordict) if type(tensordict) is TensorDict else None
        action = raw.get(ACTION) if raw is not None else None
        if action is None:
            action = tensordict.get(ACTION)
        gym_action = None
        if self.validate_actions:
            if self._cache is None:  # the cache picks the writer (a container called us)
                self._spec_cache()
            checked = self._checked_write
            if checked is not None:  # else the generic check ran in step()
                gym_action = checked(action)
                if gym_action is INVALID:
                    self._check_action_slowly(tensordict)  # raises, unless the action fits
                    gym_action = None
        try:
            if gym_action is None:
                gym_action = self._write_action(action)
            obs, reward, terminated, truncated, info = self._env.step(gym_action)
        except (TypeError, ValueError, AttributeError, IndexError, AssertionError) as err:
            raise_if_bad_action(self, action, self.batch_size, err)
            raise
        if self._frame_skip > 1:
            obs, reward, terminated, truncated, info = self._repeat(
                gym_action, obs, reward, terminated, truncated, info
            )
        data = self._read_obs(obs)
        if self._vector:
            shape = self._flag_shape
            data[REWARD] = torch.from_numpy(np.asarray(reward, dtype=np.float32).reshape(shape))
            terminated = np.asarray(terminated, dtype=bool).reshape(shape)
            truncated = np.asarray(truncated, dtype=bool).reshape(shape)
            data[TERMINATED] = torch.from_numpy(terminated)
            data[TRUNCATED] = torch.from_numpy(truncated)
            data[DONE] = torch.from_numpy(terminated | truncated)
        else:
            data[REWARD] = torch.from_numpy(np.array([reward], dtype=np.float32))
            # one array, three 1-element views: cheaper than three arrays
            flags = np.array([terminated, truncated, terminated or truncated], dtype=bool)
            data[TERMINATED] = torch.from_numpy(flags[0:1])
            data[TRUNCATED] = torch.from_numpy(flags[1:2])
            data[DONE] = torch.from_numpy(flags[2:3])
        return self._output(data, info)

    def _repeat(
        self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> tuple[Any, Any, Any, Any, Any]:
        step = self._env.step
        total = np.asarray(reward, dtype=np.float64).copy()
        for _ in range(self._frame_skip - 1):
            if np.any(terminated) or np.any(truncated):
                break
            obs, reward, terminated, truncated, info = step(action)
            total += reward
        return obs, total if self._vector else float(total), terminated, truncated, info

    @classmethod
    def _batched_stepper(cls, envs: Sequence[EnvBase]) -> GymBatchStepper | None:
        """Steps ``envs`` as one batch for :class:`~torchrl.envs.SerialEnv` (``None``: cannot).

        The stepper gives the values that stepping and resetting the envs one by one would
        give. The envs qualify when all are instances of ``cls`` exactly, unbatched (not vector
        envs), without pixels, info readers or type checks, and when ``cls`` changes none of
        the wrapper's step, reset and output methods (a subclass that does must be stepped
        through them).
        """
        if not envs or any(type(env) is not cls for env in envs):
            return None
        names = (
            "_step",
            "_reset",
            "_reset_gym",
            "_output",
            "_repeat",
            "_make_converters",
            "_set_seed",
        )
        for name in names:
            if getattr(cls, name, None) is not getattr(GymWrapper, name, None):
                return None
        if cls.step is not EnvBase.step or cls.reset is not EnvBase.reset:
            return None
        wrappers = cast("list[GymWrapper]", list(envs))
        first = wrappers[0]
        for env in wrappers:
            if (
                env._vector
                or env._from_pixels
                or env.info_dict_reader
                or env.run_type_checks
                or env.batch_size
                or env.device != first.device
                or env._categorical != first._categorical
                or env.frame_skip != first.frame_skip
                or type(env.env.action_space) is not type(first.env.action_space)
                or type(env.env.observation_space) is not type(first.env.observation_space)
                or has_spec_conversion(env.env.action_space)
                or has_spec_conversion(env.env.observation_space)
            ):
                return None
        if any(type(key) is not str for key in first.observation_keys):
            return None
        return GymBatchStepper(wrappers)

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={_env_name(self._env)}, batch_size={self.batch_size}, "
            f"device={self.device})"
        )


class ClassProperty:
    """A read-only attribute computed on access, on the class and its instances alike.

    Args:
        getter: called with the class (also when read on an instance).

    Examples:
        >>> from torchrl.envs.libs.gym import ClassProperty
        >>> class Registry:
        ...     names = ClassProperty(lambda cls: [cls.__name__])
        >>> Registry.names, Registry().names
        (['Registry'], ['Registry'])
    """

    def __init__(self, getter: Callable[[type], Any]) -> None:
        self._getter = getter
        self.__doc__ = getter.__doc__

    def __get__(self, instance: Any, owner: type) -> Any:
        return self._getter(owner)


def _available_envs(cls: type) -> list[str]:
    """The ids registered with the current :func:`gym_backend` (its ``envs.registry``), sorted."""
    return sorted(gym_backend("envs").registry.keys())


class GymEnv(GymWrapper):
    """Builds an env from its id (``make`` of the current :func:`gym_backend`) and wraps it.

    With ``num_envs=n`` it builds a vector env of ``n`` copies (``gymnasium.make_vec`` with
    ``autoreset_mode=DISABLED``) of batch ``[n]``. Keyword arguments that are not
    :class:`GymWrapper`'s go to ``gymnasium.make`` (e.g. ``max_episode_steps``, ``render_mode``,
    env-specific arguments). ``GymEnv.available_envs`` lists the registered ids.

    Args:
        env_name: the gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: build a vector env of this many sub-envs (``0``: a single env, batch ``[]``).
        vectorization_mode: ``"sync"`` (sub-envs stepped in this process) or ``"async"`` (one
            process each).
        categorical_action_encoding: see :class:`GymWrapper`.
        from_pixels: see :class:`GymWrapper`; ``render_mode="rgb_array"`` is passed to ``make``.
        pixels_only: see :class:`GymWrapper`.
        frame_skip: see :class:`GymWrapper`.
        device: see :class:`GymWrapper`.
        batch_size: see :class:`GymWrapper`.
        allow_done_after_reset: see :class:`GymWrapper`.
        validate_actions: see :class:`GymWrapper`.
        **kwargs: passed to ``gymnasium.make`` (or to every sub-env for ``make_vec``).

    Examples:
        >>> from torchrl.envs import GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=4)
        >>> env
        GymEnv(env=CartPole-v1, batch_size=torch.Size([4]), device=cpu)
        >>> env.rollout(10, break_when_any_done=False).batch_size
        torch.Size([4, 10])
        >>> "Pendulum-v1" in GymEnv.available_envs
        True
    """

    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        env_name: str,
        *,
        num_envs: int = 0,
        vectorization_mode: str = "sync",
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
        gym = gym_backend()
        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        if gym.__name__ != "gymnasium":
            if num_envs:
                raise NotImplementedError(
                    f"GymEnv: num_envs={num_envs} needs gymnasium's vector envs (the backend is "
                    f"{gym.__name__} {getattr(gym, '__version__', '')}); use "
                    "set_gym_backend('gymnasium'), or SerialEnv/ParallelEnv of single envs"
                )
            # gym 0.26's passive env checker uses np.bool8, which numpy 2 removed: it fails on
            # the first step of every env, so it is off unless the caller asks for it
            kwargs.setdefault("disable_env_checker", True)
        if gym.__name__ == "gymnasium" and env_name.startswith("ALE/"):
            register_ale_envs()
        if num_envs:
            if vectorization_mode not in ("sync", "async"):
                raise ValueError(
                    f"GymEnv: vectorization_mode must be 'sync' or 'async', got "
                    f"{vectorization_mode!r} (a vector entry point cannot disable autoreset)"
                )
            env = gym.make_vec(
                env_name,
                num_envs=int(num_envs),
                vectorization_mode=vectorization_mode,
                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
                **kwargs,
            )
        else:
            env = gym.make(env_name, **kwargs)
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
