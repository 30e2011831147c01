"""Transforms about the life of an episode: ``Timer``, ``AutoResetTransform`` (with
``AutoResetEnv``), ``TerminateTransform``, ``EndOfLifeTransform``, ``RandomTruncationTransform``
and ``BatchSizeTransform``.

They act where an episode starts, ends or is measured: they write done flags, time marks and
lives, or change how the env is reset and batched. All of them need an env (their ``forward``
refuses a bare TensorDict, except ``TerminateTransform``, which only reads its input).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT, RESET, STEP_COUNT, TERMINATED, TRUNCATED
from torchrl._types import NestedKey
from torchrl.data.specs import Categorical, Composite, TensorSpec, Unbounded
from torchrl.data.specs.continuous import UnboundedDiscrete
from torchrl.envs.transforms._utils import (
    done_groups,
    expand_right,
    get,
    key_list,
    missing_key_error,
    set_,
    spec_apply,
    unravel_key,
    with_prefix,
)
from torchrl.envs.transforms.base import Compose, Transform
from torchrl.envs.transforms.env import TransformedEnv

__all__ = [
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "EndOfLifeTransform",
    "RandomTruncationTransform",
    "TerminateTransform",
    "Timer",
]


def _env_only(owner: Transform) -> RuntimeError:
    return RuntimeError(
        f"{type(owner).__name__} acts on env resets and steps; it cannot be applied to a "
        "TensorDict on its own (use it in a TransformedEnv)"
    )


def _flag_spec(shape: torch.Size, device: Any) -> TensorSpec:
    return Categorical(2, shape=shape, dtype=torch.bool, device=device)


def _broadcast_flag(owner: Transform, flag: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``flag`` with trailing singleton dims added, expanded to ``shape``."""
    try:
        return expand_right(flag, len(shape)).expand(shape)
    except RuntimeError as err:
        raise ValueError(
            f"{type(owner).__name__}: a flag of shape {list(flag.shape)} cannot be broadcast "
            f"to the done entries' shape {list(shape)}"
        ) from err


# ------------------------------------------------------------------------------------- Timer
class Timer(Transform):
    """Measures the time spent in the env's steps and resets, and in the policy in between.

    After every step, ``("next", "time_step")`` holds the seconds spent in the step (from the
    step's inverse pass to its outputs), ``("next", "time_policy")`` the seconds between the end
    of the previous step or reset and the start of this step (the policy, and whatever the
    caller did), and ``("next", "time_reset")`` is 0. A reset writes ``"time_reset"`` (its own
    duration) and zeros for the two others. The entries are floats of the default dtype, shaped
    like the env's batch.

    Args:
        out_keys: the three keys ``[step, policy, reset]`` (default: ``time_key`` + ``"_step"``,
            ``"_policy"``, ``"_reset"``).
        time_key: the prefix of the default keys.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import Timer, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), Timer())
        >>> rollout = env.rollout(3)
        >>> bool((rollout["next", "time_step"] > 0).all()), rollout["time_reset"].shape
        (True, torch.Size([3]))
    """

    def __init__(self, out_keys: Sequence[NestedKey] | None = None, time_key: str = "time") -> None:
        super().__init__()
        if not isinstance(time_key, str):
            raise TypeError(f"Timer: time_key must be a str, got {time_key!r}")
        keys: list[NestedKey] = (
            [f"{time_key}_step", f"{time_key}_policy", f"{time_key}_reset"]
            if out_keys is None
            else key_list(out_keys, "out_keys")
        )
        if len(keys) != 3:
            raise ValueError(
                f"Timer: out_keys are the three keys [step, policy, reset], got {keys}"
            )
        self.time_key = time_key
        self.time_keys: list[NestedKey] = keys
        self._last_end: float | None = None
        self._step_start: float | None = None
        self._reset_start: float | None = None

    def _marks(self, td: TensorDictBase, step: float, policy: float, reset: float) -> None:
        dtype = torch.get_default_dtype()
        shape, device = td.batch_size, td.device
        for key, value in zip(self.time_keys, (step, policy, reset)):
            set_(td, key, torch.full(shape, value, dtype=dtype, device=device))

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._reset_start = time.perf_counter()
        return tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        now = time.perf_counter()
        start = self._reset_start if self._reset_start is not None else now
        self._marks(tensordict_reset, 0.0, 0.0, now - start)
        self._reset_start = None
        self._last_end = time.perf_counter()
        return tensordict_reset

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._step_start = time.perf_counter()
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        now = time.perf_counter()
        start = self._step_start if self._step_start is not None else now
        policy = start - self._last_end if self._last_end is not None else 0.0
        self._marks(next_tensordict, now - start, policy, 0.0)
        self._step_start = None
        self._last_end = time.perf_counter()
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise _env_only(self)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key in self.time_keys:
            observation_spec[key] = Unbounded(
                shape=observation_spec.shape,
                dtype=torch.get_default_dtype(),
                device=observation_spec.device,
            )
        return observation_spec

    def extra_repr(self) -> str:
        return f"out_keys={self.time_keys}"


# --------------------------------------------------------------------------------- auto-reset
class AutoResetTransform(Transform):
    """Adapts an env that resets itself when an episode ends (the observation returned by the
    final step is already the first one of the next episode).

    Use it as the first transform of an :class:`AutoResetEnv`. When a step reports ``done``, the
    observations it returned are cached (they start the next episode and are what the next
    :meth:`reset` returns, without resetting the base env again), and, with ``replace``, the
    ``"next"`` observations of the finished sub-envs are overwritten with fill values (the true
    last observation is not known). Sub-envs not done keep their values.

    Args:
        replace: overwrite the ``"next"`` observations of finished sub-envs (default ``True``);
            ``False`` leaves the (next-episode) values in place and ignores the fill values.
        fill_float: the fill value of float entries (``"nan"``, ``"inf"`` or a number).
        fill_int: the fill value of integer entries.
        fill_bool: the fill value of boolean entries.

    Examples:
        >>> from torchrl.envs.transforms import AutoResetEnv, AutoResetTransform
        >>> AutoResetTransform(fill_float=0.0).fill_float
        0.0
    """

    def __init__(
        self,
        *,
        replace: bool | None = None,
        fill_float: float | str = "nan",
        fill_int: int = -1,
        fill_bool: bool = False,
    ) -> None:
        super().__init__()
        self.replace = True if replace is None else bool(replace)
        try:
            self.fill_float = float(fill_float)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"AutoResetTransform: fill_float must be a number or 'nan'/'inf', got "
                f"{fill_float!r}"
            ) from err
        self.fill_int = int(fill_int)
        self.fill_bool = bool(fill_bool)
        self._obs_keys: list[NestedKey] = []
        self._done_keys: list[NestedKey] = []
        # The observations that start the next episode, waiting for the next reset.
        self._cache: TensorDictBase | None = None

    def _fill(self, dtype: torch.dtype) -> float | int | bool:
        if dtype.is_floating_point or dtype.is_complex:
            return self.fill_float
        if dtype == torch.bool:
            return self.fill_bool
        return self.fill_int

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        container = self._container()
        while isinstance(container, Compose):
            container = container._container()
        if not isinstance(container, AutoResetEnv):
            raise RuntimeError(
                "AutoResetTransform must be the first transform of an AutoResetEnv, found in a "
                f"{type(container).__name__}"
            )
        done = get(next_tensordict, DONE)
        if done is None:
            raise missing_key_error(self, DONE, next_tensordict)
        if not bool(done.any()):
            return next_tensordict
        batch = next_tensordict.batch_size
        cache = TensorDict(batch_size=batch, device=next_tensordict.device)
        for key in self._obs_keys:
            value = next_tensordict.get(key, None)
            if value is None:
                continue
            cache.set(key, value)
            if self.replace and isinstance(value, torch.Tensor):
                mask = expand_right(done.reshape(*batch, -1).any(-1), value.ndim)
                fill = torch.full((), self._fill(value.dtype), dtype=value.dtype)
                next_tensordict.set(key, torch.where(mask, fill.to(value.device), value))
        for key in self._done_keys:
            flag = next_tensordict.get(key, None)
            if flag is not None:
                cache.set(key, torch.zeros_like(flag))
        self._cache = cache
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise _env_only(self)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        obs = output_spec["full_observation_spec"]
        self._obs_keys = list(obs.keys(include_nested=True, leaves_only=True))
        self._done_keys = list(output_spec["full_done_spec"].keys(True, True))
        return output_spec

    def extra_repr(self) -> str:
        return f"replace={self.replace}, fill_float={self.fill_float}"


class AutoResetEnv(TransformedEnv):
    """A ``TransformedEnv`` over an env that resets itself at the end of each episode.

    Its first transform must be an :class:`AutoResetTransform` (added when no transform is
    given). After a step that ended an episode, :meth:`reset` returns the observations the base
    env already produced for the next episode instead of resetting the base env again; the
    first reset goes to the base env.

    Args:
        env: the auto-resetting base env.
        transform: the transforms, an ``AutoResetTransform`` first (default:
            ``AutoResetTransform()``).
        cache_specs: see :class:`TransformedEnv`.

    Examples:
        >>> from torchrl.envs.transforms import AutoResetEnv, AutoResetTransform
        >>> AutoResetEnv.__mro__[1].__name__
        'TransformedEnv'
    """

    def __init__(
        self,
        env: Any,
        transform: Transform | None = None,
        cache_specs: bool = True,
        **kwargs: Any,
    ) -> None:
        if transform is None:
            transform = AutoResetTransform()
        super().__init__(env, transform, cache_specs, **kwargs)
        self._auto_transform()

    def _auto_transform(self) -> AutoResetTransform:
        compose = self._compose_now()
        first: Transform | None = compose._ts[0] if compose._ts else None
        while isinstance(first, Compose):
            first = first._ts[0] if first._ts else None
        if not isinstance(first, AutoResetTransform):
            raise RuntimeError(
                "AutoResetEnv: the first transform must be an AutoResetTransform, got "
                f"{type(first).__name__}"
            )
        return first

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        auto = self._auto_transform()
        cache = auto._cache
        if cache is None:
            return super()._reset(tensordict, **kwargs)
        auto._cache = None
        out = cache
        compose = self._compose_now()
        if compose._reset_list:
            if tensordict is None:
                tensordict = TensorDict(batch_size=out.batch_size, device=out.device)
            out = compose._reset(tensordict, out)
        return out


# ---------------------------------------------------------------------------------- terminate
class TerminateTransform(Transform):
    """Ends episodes when a condition holds: ``stop(next_tensordict)`` is or-ed into the
    ``terminated`` flags (and ``done``) after every step.

    Args:
        stop: a callable taking the step's outputs (the ``"next"`` TensorDict) and returning a
            boolean (scalar or tensor, broadcast to each group's done flags: a ``[*B]`` result
            fits flags of shape ``[*B, 1]``).
        write_done: also or the condition into ``done`` (so that rollouts stop).

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import TerminateTransform, TransformedEnv
        >>> env = TransformedEnv(
        ...     PendulumEnv(seed=0), TerminateTransform(lambda td: td["th"] < 10.0)
        ... )
        >>> rollout = env.rollout(10)
        >>> rollout.shape, bool(rollout["next", "terminated"][-1])
        (torch.Size([1]), True)
    """

    def __init__(self, stop: Callable[[TensorDictBase], Any], *, write_done: bool = True) -> None:
        if not callable(stop):
            raise TypeError(f"TerminateTransform: stop must be callable, got {stop!r}")
        super().__init__()
        self.stop = stop
        self.write_done = bool(write_done)
        self._groups: list[tuple[tuple[str, ...], torch.Size]] = [((), torch.Size([1]))]

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        flag = torch.as_tensor(self.stop(next_tensordict), device=next_tensordict.device)
        if flag.dtype != torch.bool:
            raise TypeError(
                f"TerminateTransform: stop must return booleans, got a {flag.dtype} value"
            )
        for prefix, _ in self._groups:
            keys = [with_prefix(prefix, TERMINATED)]
            if self.write_done:
                keys.append(with_prefix(prefix, DONE))
            for key in keys:
                current = get(next_tensordict, key)
                if current is None:
                    raise missing_key_error(self, key, next_tensordict)
                set_(next_tensordict, key, current | _broadcast_flag(self, flag, current.shape))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the condition to ``tensordict["next"]`` (or to ``tensordict`` without one)."""
        next_td = tensordict.get(NEXT, None)
        if isinstance(next_td, TensorDictBase):
            self._call(next_td)
            return tensordict
        return self._call(tensordict)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        self._groups = done_groups(done_spec)
        for prefix, shape in self._groups:
            for name in (TERMINATED, DONE):
                key = with_prefix(prefix, name)
                if key not in done_spec:
                    done_spec[key] = _flag_spec(shape, done_spec.device)
        return done_spec


# ------------------------------------------------------------------------------- end of life
class EndOfLifeTransform(Transform):
    """Writes an end-of-life signal for games with lives (Atari): ``True`` after a step that
    lost a life (or ended the episode).

    The lives are read from the base env (``eol_attribute``, a dotted path on the base env or,
    when absent there, on the simulator it wraps, e.g. a gymnasium env's
    ``unwrapped.ale.lives``; a callable is called) at every reset and step, and written to
    ``lives_key``; with ``eol_attribute=None`` the env writes ``lives_key`` itself (one value
    per sub-env, so the transform also works on a batch of envs, such as a ``SerialEnv`` of
    games). ``eol_key`` is ``lives < previous lives`` or ``done``. Both are observations shaped
    like ``done_key``. A value estimator can treat ``eol_key`` as its terminal flag.

    Args:
        eol_key: the end-of-life entry.
        lives_key: the lives entry.
        done_key: the env's done flag (its shape is used and it is or-ed in).
        eol_attribute: where the lives are, from the base env (``None``: in the env's outputs).

    Examples:
        >>> from torchrl.envs.transforms import EndOfLifeTransform
        >>> EndOfLifeTransform().eol_key
        'end-of-life'
    """

    def __init__(
        self,
        eol_key: NestedKey = "end-of-life",
        lives_key: NestedKey = "lives",
        done_key: NestedKey = DONE,
        eol_attribute: str | None = "unwrapped.ale.lives",
    ) -> None:
        super().__init__()
        self.eol_key = unravel_key(eol_key)
        self.lives_key = unravel_key(lives_key)
        self.done_key = unravel_key(done_key)
        if eol_attribute is not None and (not isinstance(eol_attribute, str) or not eol_attribute):
            raise TypeError(
                f"EndOfLifeTransform: eol_attribute is a dotted path or None, got {eol_attribute!r}"
            )
        self.eol_attribute = eol_attribute

    def _lives(self, data: TensorDictBase, shape: torch.Size, device: Any) -> torch.Tensor:
        """The lives now: from the env's output ``data``, or read from the env."""
        if self.eol_attribute is not None:
            return self._read_lives(self.eol_attribute, shape, device)
        lives = get(data, self.lives_key)
        if lives is None:
            raise KeyError(
                f"EndOfLifeTransform: eol_attribute=None reads the lives {self.lives_key!r} from "
                f"the env's output, which lacks them (keys: {list(data.keys(True, True))})"
            )
        return lives

    def _read_lives(self, attribute: str, shape: torch.Size, device: Any) -> torch.Tensor:
        parent = self.parent
        if parent is None:
            raise RuntimeError("EndOfLifeTransform reads the lives from an env: use it in one")
        base = parent.base_env
        candidates = [base]
        wrapped = getattr(base, "env", None)
        if wrapped is not None and wrapped is not base:
            candidates.append(wrapped)
        value: Any = None
        for obj in candidates:
            try:
                for part in attribute.split("."):
                    obj = getattr(obj, part)
            except AttributeError:
                continue
            value = obj
            break
        else:
            raise AttributeError(
                f"EndOfLifeTransform: neither the base env {type(base).__name__} nor the env it "
                f"wraps has the attribute {attribute!r}"
            )
        if callable(value):
            value = value()
        lives = torch.as_tensor(value, dtype=torch.int64, device=device)
        if lives.numel() == 1:
            return lives.reshape(()).expand(shape).clone()
        if lives.numel() == math.prod(shape):
            return lives.reshape(shape)
        raise ValueError(
            f"EndOfLifeTransform: {attribute!r} gave {lives.numel()} values, expected 1 "
            f"or {math.prod(shape)} (the shape of {self.done_key!r}: {list(shape)})"
        )

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        done = get(tensordict_reset, self.done_key)
        if done is None:
            raise missing_key_error(self, self.done_key, tensordict_reset)
        lives = self._lives(tensordict_reset, done.shape, done.device)
        set_(tensordict_reset, self.lives_key, lives)
        set_(tensordict_reset, self.eol_key, torch.zeros_like(done))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        done = get(next_tensordict, self.done_key)
        if done is None:
            raise missing_key_error(self, self.done_key, next_tensordict)
        previous = get(tensordict, self.lives_key)
        if previous is None:
            raise KeyError(
                f"EndOfLifeTransform: the previous lives {self.lives_key!r} are missing from the "
                "step input; reset the env first"
            )
        lives = self._lives(next_tensordict, done.shape, done.device)
        set_(next_tensordict, self.lives_key, lives)
        set_(next_tensordict, self.eol_key, (lives < previous) | done)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise _env_only(self)

    def _done_leaf(self, done_spec: Composite) -> TensorSpec:
        if self.done_key not in done_spec:
            raise KeyError(
                f"EndOfLifeTransform: the done key {self.done_key!r} is not in the env's done "
                f"spec (keys: {list(done_spec.keys(True, True))})"
            )
        return done_spec[self.done_key]

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        leaf = self._done_leaf(output_spec["full_done_spec"])
        obs = output_spec["full_observation_spec"]
        if self.eol_attribute is None:  # the env's own lives entry, shaped like done
            if self.lives_key not in obs.keys(True, True):
                raise KeyError(
                    f"EndOfLifeTransform: eol_attribute=None reads the lives {self.lives_key!r} "
                    f"from the env's outputs, but its observation spec has no such entry "
                    f"(keys: {list(obs.keys(True, True))})"
                )
            lives = obs[self.lives_key]
            if lives.shape != leaf.shape:
                raise ValueError(
                    f"EndOfLifeTransform: the lives {self.lives_key!r} must be shaped like the "
                    f"done flag {self.done_key!r} ({list(leaf.shape)}), got {list(lives.shape)}"
                )
        else:
            lives = UnboundedDiscrete(shape=leaf.shape, dtype=torch.int64, device=leaf.device)
            obs[self.lives_key] = lives
        obs[self.eol_key] = _flag_spec(leaf.shape, leaf.device)
        self._lives_spec = lives
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        # the step reads the previous lives from its input
        lives = getattr(self, "_lives_spec", None)
        if lives is not None:
            input_spec["full_state_spec"][self.lives_key] = lives.clone()
        return input_spec


# ------------------------------------------------------------------------- random truncation
class RandomTruncationTransform(Transform):
    """Truncates episodes at random horizons, so that batched envs do not all end together.

    At the first reset, each sub-env gets a horizon drawn uniformly in ``[1, max_horizon]``.
    At the next reset (the end of that spread-out first episode) a horizon in
    ``[min_horizon, max_horizon]`` is drawn with probability ``first_episode_prob``, and at
    every later reset with probability ``prob``; otherwise the horizon is ``max_horizon``. A
    step whose ``step_count`` reaches the horizon sets ``truncated`` and ``done``. Place it
    after a :class:`StepCounter` (it reads ``step_count``).

    Args:
        min_horizon: the smallest random horizon (``>= 1``).
        max_horizon: the largest horizon (``>= min_horizon``), also the default one.
        prob: the probability of a random horizon at a reset.
        first_episode_prob: the same for the first reset after the initial spread (default:
            ``prob``).
        step_count_key: the step count written by ``StepCounter``.
        truncated_key: the truncation flag written.
        done_key: the done flag updated.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import (
        ...     Compose, RandomTruncationTransform, StepCounter, TransformedEnv)
        >>> _ = torch.manual_seed(0)
        >>> env = TransformedEnv(
        ...     PendulumEnv(batch_size=[8], seed=0),
        ...     Compose(StepCounter(), RandomTruncationTransform(5, 10)),
        ... )
        >>> rollout = env.rollout(10, break_when_any_done=False)
        >>> bool((rollout["next", "step_count"] <= 10).all())
        True
    """

    def __init__(
        self,
        min_horizon: int,
        max_horizon: int,
        prob: float = 0.0,
        first_episode_prob: float | None = None,
        *,
        step_count_key: NestedKey = STEP_COUNT,
        truncated_key: NestedKey = TRUNCATED,
        done_key: NestedKey = DONE,
    ) -> None:
        min_horizon, max_horizon = int(min_horizon), int(max_horizon)
        if not 1 <= min_horizon <= max_horizon:
            raise ValueError(
                "RandomTruncationTransform: need 1 <= min_horizon <= max_horizon, got "
                f"min_horizon={min_horizon}, max_horizon={max_horizon}"
            )
        first = prob if first_episode_prob is None else first_episode_prob
        for name, p in (("prob", prob), ("first_episode_prob", first)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"RandomTruncationTransform: {name} must be in [0, 1], got {p}")
        super().__init__()
        self.min_horizon = min_horizon
        self.max_horizon = max_horizon
        self.prob = float(prob)
        self.first_episode_prob = float(first)
        self.step_count_key = unravel_key(step_count_key)
        self.truncated_key = unravel_key(truncated_key)
        self.done_key = unravel_key(done_key)
        #: The horizon of each sub-env (shaped like the step count); ``None`` before a reset.
        self.horizon: torch.Tensor | None = None
        # How many resets each sub-env has seen (0: none, 1: spread-out first episode).
        self._resets: torch.Tensor | None = None

    def _draw(self, low: int, shape: torch.Size, device: Any) -> torch.Tensor:
        return torch.randint(low, self.max_horizon + 1, shape, device=device)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        ref = get(tensordict_reset, self.step_count_key)
        if ref is None:
            raise KeyError(
                f"RandomTruncationTransform: {self.step_count_key!r} is missing from the reset "
                "outputs; place the transform after a StepCounter"
            )
        shape, device = ref.shape, ref.device
        horizon, resets = self.horizon, self._resets
        if horizon is None or resets is None or horizon.shape != shape:
            horizon = torch.full(shape, self.max_horizon, dtype=torch.int64, device=device)
            resets = torch.zeros(shape, dtype=torch.int64, device=device)
        mask = get(tensordict, RESET)
        if mask is None:
            mask = torch.ones(shape, dtype=torch.bool, device=device)
        else:
            mask = _broadcast_flag(
                self, mask.reshape(*mask.shape[: len(shape) - 1], -1).any(-1), shape
            )
        spread = self._draw(1, shape, device)
        random = self._draw(self.min_horizon, shape, device)
        u = torch.rand(shape, device=device)
        p = torch.where(resets == 1, self.first_episode_prob, self.prob)
        later = torch.where(u < p, random, torch.full_like(random, self.max_horizon))
        new = torch.where(resets == 0, spread, later)
        self.horizon = torch.where(mask, new, horizon)
        self._resets = resets + mask.long()
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        count = get(next_tensordict, self.step_count_key)
        if count is None:
            raise KeyError(
                f"RandomTruncationTransform: {self.step_count_key!r} is missing from the step "
                "outputs; place the transform after a StepCounter"
            )
        if self.horizon is None:
            raise RuntimeError("RandomTruncationTransform: reset the env before stepping it")
        trunc = count >= self.horizon
        for key in (self.truncated_key, self.done_key):
            current = get(next_tensordict, key)
            set_(next_tensordict, key, trunc if current is None else current | trunc)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise _env_only(self)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        obs = output_spec["full_observation_spec"]
        if self.step_count_key not in obs:
            raise KeyError(
                f"RandomTruncationTransform: {self.step_count_key!r} is not in the env's "
                "observation spec; place the transform after a StepCounter"
            )
        shape = obs[self.step_count_key].shape
        done_spec = output_spec["full_done_spec"]
        for key in (self.truncated_key, self.done_key):
            if key not in done_spec:
                done_spec[key] = _flag_spec(shape, done_spec.device)
        return output_spec

    def extra_repr(self) -> str:
        return (
            f"min_horizon={self.min_horizon}, max_horizon={self.max_horizon}, prob={self.prob}, "
            f"first_episode_prob={self.first_episode_prob}"
        )


# -------------------------------------------------------------------------------- batch size
def _reshape_spec(spec: TensorSpec, old_ndim: int, new_batch: torch.Size) -> TensorSpec:
    """``spec`` with its first ``old_ndim`` (batch) dims replaced by ``new_batch``."""
    if isinstance(spec, Composite):
        shape = torch.Size((*new_batch, *spec.shape[old_ndim:]))
        return Composite(
            {k: _reshape_spec(v, old_ndim, new_batch) for k, v in spec.items()},
            shape=shape,
            device=spec.device,
        )
    return spec_apply(
        spec, lambda t: t.reshape(*new_batch, *t.shape[old_ndim:]), "BatchSizeTransform"
    )


class BatchSizeTransform(Transform):
    """Changes the batch size of an env: expands a batch-unlocked env to a batch size, or
    reshapes a batched env's batch dims.

    With ``batch_size``, the base env must accept inputs of that batch size (a batch-unlocked,
    stateless env such as :class:`PendulumEnv`) and its batch size must broadcast to it; resets
    whose output has the base batch size are expanded (or built by ``reset_func``). With
    ``reshape_fn`` (a reshape, flatten, unflatten, squeeze or unsqueeze of a TensorDict), step
    inputs are reshaped back to the base batch size and outputs through ``reshape_fn``.

    Args:
        batch_size: the new batch size (exclusive with ``reshape_fn``).
        reshape_fn: a function mapping a TensorDict of the base batch size to the new one.
        reset_func: ``reset_func(tensordict, tensordict_reset)`` returns the reset outputs of
            the new batch size (``tensordict`` is the reset input).
        env_kwarg: pass the env (the parent) to ``reset_func`` as an ``env`` keyword.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import BatchSizeTransform, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), BatchSizeTransform(batch_size=[4]))
        >>> env.batch_size, env.rollout(3).shape
        (torch.Size([4]), torch.Size([4, 3]))
    """

    def __init__(
        self,
        *,
        batch_size: Sequence[int] | torch.Size | None = None,
        reshape_fn: Callable[[TensorDictBase], TensorDictBase] | None = None,
        reset_func: Callable[..., TensorDictBase] | None = None,
        env_kwarg: bool = False,
    ) -> None:
        if (batch_size is None) == (reshape_fn is None):
            raise ValueError("BatchSizeTransform takes exactly one of batch_size and reshape_fn")
        if reshape_fn is not None and not callable(reshape_fn):
            raise TypeError(f"BatchSizeTransform: reshape_fn must be callable, got {reshape_fn!r}")
        if reset_func is not None and not callable(reset_func):
            raise TypeError(f"BatchSizeTransform: reset_func must be callable, got {reset_func!r}")
        super().__init__()
        self.batch_size = None if batch_size is None else torch.Size(batch_size)
        self.reshape_fn = reshape_fn
        self.reset_func = reset_func
        self.env_kwarg = bool(env_kwarg)
        self._base_batch: torch.Size | None = None
        self._new_batch: torch.Size | None = None

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        batch_size = torch.Size(batch_size)
        self._base_batch = batch_size
        if self.batch_size is not None:
            new = self.batch_size
            try:
                fits = torch.broadcast_shapes(batch_size, new) == new
            except RuntimeError:
                fits = False
            if not fits:
                raise ValueError(
                    f"BatchSizeTransform: the env batch size {list(batch_size)} cannot be "
                    f"expanded to {list(new)}"
                )
        else:
            assert self.reshape_fn is not None
            new = self.reshape_fn(TensorDict(batch_size=batch_size)).batch_size
        self._new_batch = torch.Size(new)
        return self._new_batch

    def _spec(self, spec: Composite) -> Composite:
        if self._base_batch is None or self._new_batch is None:
            self.transform_env_batch_size(spec.shape)
        assert self._base_batch is not None and self._new_batch is not None
        if self.batch_size is not None:
            return spec.expand(*self._new_batch)
        result = _reshape_spec(spec, len(self._base_batch), self._new_batch)
        assert isinstance(result, Composite)
        return result

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        return self._spec(output_spec)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        return self._spec(input_spec)

    def _to_base(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.reshape_fn is None or self._base_batch is None:
            return tensordict
        if tensordict.batch_size == self._base_batch:
            return tensordict
        return tensordict.reshape(*self._base_batch)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._to_base(tensordict)

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._to_base(tensordict)

    def _to_new(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.reshape_fn is not None:
            if tensordict.batch_size == self._new_batch:
                return tensordict
            return self.reshape_fn(tensordict)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._to_new(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        new = self._new_batch
        if self.reset_func is not None:
            kwargs = {"env": self.parent} if self.env_kwarg else {}
            tensordict_reset = self.reset_func(tensordict, tensordict_reset, **kwargs)
        elif self.reshape_fn is not None:
            tensordict_reset = self._to_new(tensordict_reset)
        elif new is not None and tensordict_reset.batch_size != new:
            tensordict_reset = tensordict_reset.expand(*new).clone()
        if new is not None and tensordict_reset.batch_size != new:
            raise ValueError(
                f"BatchSizeTransform: the reset outputs have batch size "
                f"{list(tensordict_reset.batch_size)}, expected {list(new)}"
            )
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reshapes a TensorDict with ``reshape_fn`` or expands it to ``batch_size``."""
        if self.reshape_fn is not None:
            return self.reshape_fn(tensordict)
        assert self.batch_size is not None
        return tensordict.expand(*self.batch_size)

    def extra_repr(self) -> str:
        if self.batch_size is not None:
            return f"batch_size={list(self.batch_size)}"
        return f"reshape_fn={self.reshape_fn!r}"
