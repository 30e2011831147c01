"""``EnvBase``: the environment contract every torchrl env follows (DESIGN.md §2-4).

A subclass writes three methods and sets its specs:

- ``_reset(tensordict, **kwargs) -> TensorDict``: the first observations (and any state) for the
  sub-envs being reset, batch ``[*batch_size]``;
- ``_step(tensordict) -> TensorDict``: reads the action (and state) from ``tensordict`` and returns
  the next-step entries: observations, ``"reward"``, and the done flags;
- ``_set_seed(seed)``: seeds the simulator.

Everything else (done-flag completion, partial resets, ``"next"`` bookkeeping, rollouts, random
actions, checks) is done here, once, for every env. Hot paths (``step``, ``step_and_maybe_reset``,
``rollout``) read key lists computed when the specs are set, and build at most one TensorDict per
step. The pieces they use live in modules of their own, none of which imports this one:

- :mod:`torchrl.envs._spec_cache`: what is derived from the specs (``SpecCache``);
- :mod:`torchrl.envs._done`: the done flags by group, partial resets (``DoneGroups``);
- :mod:`torchrl.envs._writes`: the step's output written under ``"next"`` (and, with a
  ``"_step"`` mask, the skipped sub-envs' entries kept);
- :mod:`torchrl.envs._mdp`: the next step's input (``step_mdp``);
- :mod:`torchrl.envs._rollout`: the steps of a rollout stacked (``StepStore``);
- :mod:`torchrl.envs._action_checks` and :mod:`torchrl.envs._spec_checks`: the checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl._keys import ACTION, DONE, NEXT, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._td_compat import entries
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs._action_checks import ActionCheck, make_action_check
from torchrl.envs._done import all_flag, any_flag
from torchrl.envs._mdp import apply_mdp_plan
from torchrl.envs._rollout import StepStore
from torchrl.envs._spec_cache import SpecCache
from torchrl.envs._spec_checks import check_against_specs, check_spec_shape, leading_shape
from torchrl.envs._writes import STEP_MASK, keep_skipped, set_leaf, set_next, step_mask

__all__ = ["STEP_MASK", "EnvBase", "next_seed"]

_OUTPUT_SPECS = ("full_observation_spec", "full_reward_spec", "full_done_spec")
_INPUT_SPECS = ("full_state_spec", "full_action_spec")


class EnvBase(nn.Module):
    """Base class of torchrl environments: TensorDicts in, TensorDicts out, checked by specs.

    Subclasses call ``super().__init__(...)`` first, set their specs (``observation_spec``,
    ``action_spec``, optionally ``reward_spec``, ``done_spec``, ``state_spec``), and write
    ``_reset``, ``_step`` and ``_set_seed``. Specs include the batch size: a leaf has shape
    ``[*batch_size, *leaf_shape]``. Unset reward and done specs default to an ``Unbounded``
    float reward ``[*B, 1]`` and boolean ``done``/``terminated``/``truncated`` flags ``[*B, 1]``.

    Partial resets: ``reset(td)`` with a boolean ``"_reset"`` entry (shape of ``done``) resets only
    the marked sub-envs. ``_reset`` sees the mask in its input and returns entries for *all*
    sub-envs; for every leaf it returns that the input also holds, the base keeps the input's
    values in the sub-envs that were not reset (set the class attribute
    ``_handles_partial_reset = True`` to skip that merge when ``_reset`` already does it; a
    ``_reset`` that writes into its input and returns it must do it). The result is written into
    the input TensorDict, which is returned without ``"_reset"``.

    Specs are read when set: after editing a spec in place, re-assign it or call
    :meth:`empty_cache`.

    Args:
        device: where the env's tensors live (``None``: wherever the subclass puts them).
        batch_size: the env's batch shape, e.g. ``[8]`` for 8 sub-envs (default ``[]``).
        run_type_checks: check every ``reset``/``step`` output against the specs (slow; for
            debugging).
        allow_done_after_reset: do not raise when a sub-env is done right after its reset.
        validate_actions: check the actions of every ``step`` against the action spec before
            the env is stepped (shape, dtype, bounds, one-hot rows, NaN), raising a
            ``ValueError`` that names the key, the spec and the action. It costs about 1-2
            microseconds per step on small CPU actions (a few percent of a gymnasium
            CartPole step); ``False`` skips it. Envs that hold envs (``TransformedEnv``,
            ``SerialEnv``, ``ParallelEnv``) check at their own level and step the inner envs
            below their ``step``, so an action is checked once.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded, Unbounded
        >>> from torchrl.envs import EnvBase
        >>> class Counter(EnvBase):
        ...     def __init__(self, batch_size=()):
        ...         super().__init__(batch_size=batch_size)
        ...         self.observation_spec = Unbounded(shape=(*self.batch_size, 1))
        ...         self.action_spec = Bounded(-1.0, 1.0, shape=(*self.batch_size, 1))
        ...     def _reset(self, tensordict, **kwargs):
        ...         return TensorDict(observation=torch.zeros(*self.batch_size, 1), batch_size=self.batch_size)
        ...     def _step(self, tensordict):
        ...         obs = tensordict["observation"] + 1
        ...         return TensorDict(observation=obs, reward=obs.clone(), done=obs >= 3, batch_size=self.batch_size)
        ...     def _set_seed(self, seed):
        ...         pass
        >>> rollout = Counter(batch_size=[2]).rollout(10)
        >>> rollout.batch_size  # [*batch_size, time]: stops after the first done
        torch.Size([2, 3])
        >>> rollout["next", "observation"][0].squeeze(-1)
        tensor([1., 2., 3.])
    """

    _handles_partial_reset: bool = False

    def __init__(
        self,
        *,
        device: DeviceLike = None,
        batch_size: ShapeLike | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__()
        if batch_size is None:
            batch_size = torch.Size([])
        elif isinstance(batch_size, int):
            batch_size = torch.Size([batch_size])
        else:
            batch_size = torch.Size(batch_size)
        self._batch_size = batch_size
        self._device = _make_device(device)
        self.run_type_checks = run_type_checks
        self.allow_done_after_reset = allow_done_after_reset
        self.validate_actions = bool(validate_actions)
        self._batch_locked = True
        self._closed = False
        self._cache: SpecCache | None = None
        shape = (*batch_size, 1)
        flag = Categorical(2, shape=shape, dtype=torch.bool, device=self._device)
        self._output_spec = Composite(
            full_observation_spec=Composite(shape=batch_size, device=self._device),
            full_reward_spec=Composite(
                {REWARD: Unbounded(shape=shape, dtype=torch.float32, device=self._device)},
                shape=batch_size,
                device=self._device,
            ),
            full_done_spec=Composite(
                {DONE: flag, TERMINATED: flag.clone(), TRUNCATED: flag.clone()},
                shape=batch_size,
                device=self._device,
            ),
            shape=batch_size,
            device=self._device,
        )
        self._input_spec = Composite(
            full_state_spec=Composite(shape=batch_size, device=self._device),
            full_action_spec=Composite(shape=batch_size, device=self._device),
            shape=batch_size,
            device=self._device,
        )

    # ------------------------------------------------------------------------ what subclasses write
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset(tensordict)")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _step(tensordict)")

    def _set_seed(self, seed: int | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _set_seed(seed)")

    def _close(self) -> None:
        """Releases the simulator's resources; called once by :meth:`close`."""

    # ---------------------------------------------------------------------------------- attributes
    @property
    def batch_size(self) -> torch.Size:
        """The env's batch shape: ``[]`` for one env, ``[8]`` for 8 sub-envs."""
        return self._batch_size

    @property
    def device(self) -> torch.device | None:
        """The device of the env's tensors (``None`` when unspecified)."""
        return self._device

    @property
    def batch_locked(self) -> bool:
        """Whether inputs must have exactly ``batch_size`` (``False`` for stateless envs)."""
        return self._batch_locked

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        self._batch_locked = bool(value)

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ---------------------------------------------------------------------------------------- specs
    def empty_cache(self) -> None:
        """Forgets the key lists derived from the specs (after an in-place spec edit)."""
        self._cache = None

    def _spec_cache(self) -> SpecCache:
        cache = self._cache
        if cache is None:
            cache = self._cache = SpecCache(
                self.full_action_spec,
                self.full_observation_spec,
                self.full_reward_spec,
                self.full_done_spec,
                self.full_state_spec,
                self._make_action_check,
            )
        return cache

    def _prepare(self, spec: TensorSpec, name: str, wrap_key: NestedKey | None) -> Composite:
        if not isinstance(spec, Composite):
            if wrap_key is None:
                raise TypeError(f"{type(self).__name__}.{name} must be a Composite, got {spec!r}")
            check_spec_shape(type(self).__name__, spec, name, self._batch_size)
            spec = Composite({wrap_key: spec}, shape=self._batch_size, device=spec.device)
        check_spec_shape(type(self).__name__, spec, name, self._batch_size)
        if self._device is not None and spec.device != self._device:
            spec = spec.to(self._device)
        return spec

    def _set_sub_spec(self, container: Composite, name: str, spec: Composite) -> None:
        container[name] = spec
        self.empty_cache()

    @property
    def output_spec(self) -> Composite:
        """The ``Composite`` of ``full_observation_spec``, ``full_reward_spec``, ``full_done_spec``."""
        return self._output_spec

    @output_spec.setter
    def output_spec(self, value: Composite) -> None:
        value = self._prepare(value, "output_spec", None)
        for name in _OUTPUT_SPECS:
            if name not in value.keys():
                raise KeyError(f"output_spec needs an entry {name!r}; got {value!r}")
        self._output_spec = value
        self.empty_cache()

    @property
    def input_spec(self) -> Composite:
        """The ``Composite`` of ``full_state_spec`` and ``full_action_spec``."""
        return self._input_spec

    @input_spec.setter
    def input_spec(self, value: Composite) -> None:
        value = self._prepare(value, "input_spec", None)
        for name in _INPUT_SPECS:
            if name not in value.keys():
                raise KeyError(f"input_spec needs an entry {name!r}; got {value!r}")
        self._input_spec = value
        self.empty_cache()

    @property
    def full_observation_spec(self) -> Composite:
        """All observation specs (``Composite``, shape ``batch_size``)."""
        return self._output_spec["full_observation_spec"]

    @full_observation_spec.setter
    def full_observation_spec(self, value: TensorSpec) -> None:
        value = self._prepare(value, "full_observation_spec", OBSERVATION)
        self._set_sub_spec(self._output_spec, "full_observation_spec", value)

    @property
    def observation_spec(self) -> Composite:
        """The observation specs (same as ``full_observation_spec``).

        Setting a leaf spec stores it under ``"observation"``.
        """
        return self.full_observation_spec

    @observation_spec.setter
    def observation_spec(self, value: TensorSpec) -> None:
        self.full_observation_spec = value

    @property
    def full_reward_spec(self) -> Composite:
        """All reward specs (``Composite``, shape ``batch_size``)."""
        return self._output_spec["full_reward_spec"]

    @full_reward_spec.setter
    def full_reward_spec(self, value: TensorSpec) -> None:
        value = self._prepare(value, "full_reward_spec", REWARD)
        self._set_sub_spec(self._output_spec, "full_reward_spec", value)

    @property
    def reward_spec(self) -> TensorSpec:
        """The reward spec: the leaf when there is one reward key, else the ``Composite``."""
        return _single_or_all(self.full_reward_spec)

    @reward_spec.setter
    def reward_spec(self, value: TensorSpec) -> None:
        keys = self.reward_keys if not isinstance(value, Composite) else []
        wrap = keys[0] if len(keys) == 1 else REWARD
        self.full_reward_spec = self._prepare(value, "reward_spec", wrap)

    @property
    def full_done_spec(self) -> Composite:
        """All done specs (``done``, ``terminated``, ``truncated``; ``Composite``)."""
        return self._output_spec["full_done_spec"]

    @full_done_spec.setter
    def full_done_spec(self, value: TensorSpec) -> None:
        if not isinstance(value, Composite):
            check_spec_shape(type(self).__name__, value, "full_done_spec", self._batch_size)
            value = Composite(
                {DONE: value, TERMINATED: value.clone(), TRUNCATED: value.clone()},
                shape=self._batch_size,
                device=value.device,
            )
        value = self._prepare(value, "full_done_spec", None)
        self._set_sub_spec(self._output_spec, "full_done_spec", value)

    @property
    def done_spec(self) -> TensorSpec:
        """The done specs: the leaf when there is one done key, else the ``Composite``.

        Setting a leaf spec creates ``done``, ``terminated`` and ``truncated`` entries alike.
        """
        return _single_or_all(self.full_done_spec)

    @done_spec.setter
    def done_spec(self, value: TensorSpec) -> None:
        self.full_done_spec = value

    @property
    def full_action_spec(self) -> Composite:
        """All action specs (``Composite``, shape ``batch_size``)."""
        return self._input_spec["full_action_spec"]

    @full_action_spec.setter
    def full_action_spec(self, value: TensorSpec) -> None:
        value = self._prepare(value, "full_action_spec", ACTION)
        self._set_sub_spec(self._input_spec, "full_action_spec", value)

    @property
    def action_spec(self) -> TensorSpec:
        """The action spec: the leaf when there is one action key, else the ``Composite``.

        Setting a leaf spec stores it under the current action key (``"action"`` by default).
        """
        return _single_or_all(self.full_action_spec)

    @action_spec.setter
    def action_spec(self, value: TensorSpec) -> None:
        keys = self.action_keys if not isinstance(value, Composite) else []
        wrap = keys[0] if len(keys) == 1 else ACTION
        self.full_action_spec = self._prepare(value, "action_spec", wrap)

    @property
    def full_state_spec(self) -> Composite:
        """Specs of the inputs ``_step`` reads besides the actions (``Composite``)."""
        return self._input_spec["full_state_spec"]

    @full_state_spec.setter
    def full_state_spec(self, value: TensorSpec) -> None:
        value = self._prepare(value, "full_state_spec", None)
        self._set_sub_spec(self._input_spec, "full_state_spec", value)

    @property
    def state_spec(self) -> Composite:
        """The state specs (same as ``full_state_spec``)."""
        return self.full_state_spec

    @state_spec.setter
    def state_spec(self, value: TensorSpec) -> None:
        self.full_state_spec = value

    # ---------------------------------------------------------------------- unbatched specs
    def _unbatched(self, spec: TensorSpec) -> TensorSpec:
        return spec[(0,) * len(self._batch_size)] if self._batch_size else spec

    @property
    def full_action_spec_unbatched(self) -> Composite:
        """``full_action_spec`` without the env's batch dims (read-only).

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> PendulumEnv(batch_size=[4]).action_spec_unbatched.shape
            torch.Size([1])
        """
        return cast(Composite, self._unbatched(self.full_action_spec))

    @property
    def action_spec_unbatched(self) -> TensorSpec:
        """``action_spec`` without the env's batch dims (read-only)."""
        return self._unbatched(self.action_spec)

    @property
    def full_observation_spec_unbatched(self) -> Composite:
        """``full_observation_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.full_observation_spec))

    @property
    def observation_spec_unbatched(self) -> Composite:
        """``observation_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.observation_spec))

    @property
    def full_reward_spec_unbatched(self) -> Composite:
        """``full_reward_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.full_reward_spec))

    @property
    def reward_spec_unbatched(self) -> TensorSpec:
        """``reward_spec`` without the env's batch dims (read-only)."""
        return self._unbatched(self.reward_spec)

    @property
    def full_done_spec_unbatched(self) -> Composite:
        """``full_done_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.full_done_spec))

    @property
    def done_spec_unbatched(self) -> TensorSpec:
        """``done_spec`` without the env's batch dims (read-only)."""
        return self._unbatched(self.done_spec)

    @property
    def full_state_spec_unbatched(self) -> Composite:
        """``full_state_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.full_state_spec))

    @property
    def state_spec_unbatched(self) -> Composite:
        """``state_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.state_spec))

    @property
    def input_spec_unbatched(self) -> Composite:
        """``input_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.input_spec))

    @property
    def output_spec_unbatched(self) -> Composite:
        """``output_spec`` without the env's batch dims (read-only)."""
        return cast(Composite, self._unbatched(self.output_spec))

    @property
    def action_keys(self) -> list[NestedKey]:
        """The leaf keys of ``full_action_spec``."""
        return list(self._spec_cache().action_keys)

    @property
    def reward_keys(self) -> list[NestedKey]:
        """The leaf keys of ``full_reward_spec``."""
        return list(self._spec_cache().reward_keys)

    @property
    def done_keys(self) -> list[NestedKey]:
        """The leaf keys of ``full_done_spec``."""
        return list(self._spec_cache().done_keys)

    @property
    def observation_keys(self) -> list[NestedKey]:
        """The leaf keys of ``full_observation_spec``."""
        return list(self._spec_cache().observation_keys)

    @property
    def state_keys(self) -> list[NestedKey]:
        """The leaf keys of ``full_state_spec``."""
        return list(self._spec_cache().state_keys)

    @property
    def reset_keys(self) -> list[NestedKey]:
        """The ``"_reset"`` keys, one per group of done flags (``["_reset"]`` usually)."""
        return list(self._spec_cache().reset_keys)

    @property
    def action_key(self) -> NestedKey:
        """The action key; a ``KeyError`` when the env has several."""
        return _only(self.action_keys, "action")

    @property
    def reward_key(self) -> NestedKey:
        """The reward key; a ``KeyError`` when the env has several."""
        return _only(self.reward_keys, "reward")

    # --------------------------------------------------------------------------------- stepping
    def _check_batch(self, tensordict: TensorDictBase, method: str) -> None:
        if tensordict.batch_size != self._batch_size:
            raise ValueError(
                f"{type(self).__name__}.{method}: the TensorDict's batch size "
                f"{list(tensordict.batch_size)} differs from the env's {list(self._batch_size)}"
            )

    def _make_action_check(self, action_keys: list[NestedKey]) -> ActionCheck | None:
        """The check of a step's actions (``None``: none); built with the spec cache."""
        return make_action_check(
            type(self).__name__, self.full_action_spec, action_keys, len(self._batch_size)
        )

    def _check_actions(self, tensordict: TensorDictBase) -> None:
        """Checks the actions of a step input (when ``validate_actions``), as ``step`` does.

        For subclasses whose own stepping methods do not go through :meth:`step`.
        """
        if self.validate_actions:
            check = (self._cache or self._spec_cache()).check_actions
            if check is not None:
                check(tensordict)

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Makes one step: writes what ``_step`` returns under ``"next"`` of ``tensordict``.

        Missing done flags are derived (``truncated = done & ~terminated``, ``done = terminated |
        truncated``; a lone ``done`` counts as a termination). With ``validate_actions`` (the
        default), the actions are checked against the action spec first.

        With a boolean ``"_step"`` entry (shape of the batch, or of ``done``), only the sub-envs
        where it is ``True`` step; the others keep their state and get their input's entries
        under ``"next"`` (a zero reward). The entry is consumed. Stateless envs, batched envs
        (``SerialEnv``, ``ParallelEnv``) and ``TransformedEnv`` honour it; other stateful envs
        raise unless the mask is all ``True`` or all ``False``.

        Args:
            tensordict: batch ``[*batch_size]``, holding the action(s) and any state.

        Returns:
            ``tensordict`` itself, with ``("next", ...)`` entries: observations, reward, done flags.

        Raises:
            ValueError: an action does not fit the action spec (wrong shape or dtype, out of
                bounds, not one-hot, NaN); the env is not stepped.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv()
            >>> td = env.step(env.rand_action(env.reset()))
            >>> td["next", "reward"].shape
            torch.Size([1])
        """
        if self._batch_locked and tensordict.batch_size != self._batch_size:
            self._check_batch(tensordict, "step")
        # The only cost of step masks on the hot path: one dict lookup.
        raw = entries(tensordict) if type(tensordict) is TensorDict else None
        mask = raw.get(STEP_MASK) if raw is not None else tensordict.get(STEP_MASK, None)
        if mask is not None:
            return self._masked_step(tensordict, mask)
        if self.validate_actions:
            check = (self._cache or self._spec_cache()).check_actions
            if check is not None:
                check(tensordict)
        next_td = self._step(tensordict)
        cache = self._cache or self._spec_cache()
        cache.done_groups.complete(next_td)
        if self.run_type_checks:
            self._type_check(next_td, "step()", next_=True)
        set_next(tensordict, next_td)
        return tensordict

    def _masked_step(self, tensordict: TensorDictBase, mask: Any) -> TensorDictBase:
        """``step`` with a ``"_step"`` mask: only the marked sub-envs step, the others stay put.

        A skipped sub-env's ``"next"`` entries are its input's: the same observations (and any
        other entry the input holds), a zero reward and the input's done flags (``False`` where
        the input has none). The mask is consumed: it is not in the returned TensorDict.
        """
        flags = step_mask(type(self).__name__, mask, self._batch_size)
        tensordict.del_(STEP_MASK)
        if all_flag(flags):
            return self.step(tensordict)
        cache = self._cache or self._spec_cache()
        if not any_flag(flags):
            next_td = self._skipped_step_output()
        else:
            if self.validate_actions and cache.check_actions is not None:
                cache.check_actions(tensordict)
            next_td = self._step_masked(tensordict, flags)
            cache.done_groups.complete(next_td)
        keep_skipped(next_td, tensordict, flags, cache.reward_keys, cache.done_keys)
        if self.run_type_checks:
            self._type_check(next_td, "step()", next_=True)
        set_next(tensordict, next_td)
        return tensordict

    def _skipped_step_output(self) -> TensorDictBase:
        """A step output for when no sub-env steps: zeros of the output specs (then overwritten)."""
        out = self.full_observation_spec.zero()
        out.update(self.full_reward_spec.zero())
        out.update(self.full_done_spec.zero())
        return out

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        """``_step`` for the sub-envs where ``mask`` (shape ``batch_size``) is ``True``.

        Returns entries for every sub-env; those of the skipped ones are overwritten by
        :meth:`step`. A stateless env (``batch_locked=False``, its state carried by the
        TensorDict) steps every sub-env; a stateful one must override this method to step only
        the marked sub-envs (batched and transformed envs do), else it raises.
        """
        if not self._batch_locked:
            return self._step(tensordict)
        raise ValueError(
            f"{type(self).__name__}: the step input has a {STEP_MASK!r} mask that leaves out "
            f"some of its {list(self._batch_size)} sub-envs, but this env keeps its state "
            "internally (batch-locked) and cannot step a subset of them; run the copies in a "
            "SerialEnv/ParallelEnv, or use a stateless env"
        )

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Resets the env, or only the sub-envs marked by a boolean ``"_reset"`` entry.

        Args:
            tensordict: optional input; with ``"_reset"`` (shape of ``done``), only the marked
                sub-envs are reset and the others keep their entries. It is updated in place.
            **kwargs: forwarded to ``_reset``.

        Returns:
            The reset TensorDict, batch ``[*batch_size]``, with observations and done flags
            (all ``False`` for reset sub-envs), without ``"_reset"``.

        Examples:
            >>> import torch
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv(batch_size=[3], seed=0)
            >>> td = env.reset()
            >>> td["done"].shape
            torch.Size([3, 1])
            >>> td["_reset"] = torch.tensor([[True], [False], [False]])
            >>> th = td["th"].clone()
            >>> td = env.reset(td)
            >>> bool((td["th"][1:] == th[1:]).all()), "_reset" in td.keys()
            (True, False)
        """
        if tensordict is not None and self._batch_locked:
            if tensordict.batch_size != self._batch_size:
                self._check_batch(tensordict, "reset")
        cache = self._cache or self._spec_cache()
        groups = cache.done_groups
        masks: dict[tuple[str, ...], torch.Tensor] = {}
        if tensordict is not None:
            masks = groups.read_masks(tensordict)
            if masks and not any(any_flag(m) for m in masks.values()):
                groups.drop_reset(tensordict)
                return tensordict  # nothing to reset
        # _reset sees the "_reset" masks in its input (part of the contract).
        out = self._reset(tensordict, **kwargs)
        if tensordict is not None:
            groups.drop_reset(tensordict)
        partial = (
            bool(masks)
            and out is not tensordict
            and not self._handles_partial_reset
            and not all(all_flag(m) for m in masks.values())
        )
        if not isinstance(out, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__}._reset must return a TensorDict, got {type(out).__name__}"
            )
        if out is not tensordict:
            groups.drop_reset(out)
        groups.complete(out)
        if partial and tensordict is not None:
            groups.keep_unreset(out, tensordict, masks)
        if self.run_type_checks:
            self._type_check(out, "reset()", next_=False)
        if not self.allow_done_after_reset:
            groups.check_not_done(type(self).__name__, out, masks)
        if tensordict is not None and out is not tensordict:
            return tensordict.update(out)
        return out

    def _type_check(self, td: TensorDictBase, where: str, next_: bool) -> None:
        check_against_specs(self, td, where, next_)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps, then resets only the sub-envs that are done.

        Args:
            tensordict: batch ``[*batch_size]`` with the action(s).

        Returns:
            ``(tensordict, next_input)``: the transition (with ``"next"``), and the input of the
            next step: ``step_mdp`` of the transition, with finished sub-envs reset.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv(batch_size=[4])
            >>> td = env.reset()
            >>> for _ in range(3):
            ...     td = env.rand_action(td)
            ...     transition, td = env.step_and_maybe_reset(td)
            >>> transition["next", "observation"].shape, td["observation"].shape
            (torch.Size([4, 3]), torch.Size([4, 3]))
        """
        tensordict = self.step(tensordict)
        cache = self._cache or self._spec_cache()
        next_td = apply_mdp_plan(tensordict, cache.mdp_plan)
        groups = cache.done_groups
        flags = groups.done_flags(next_td)
        if flags is not None:
            groups.set_reset(next_td, flags)
            next_td = self.reset(next_td)
        return tensordict, next_td

    def rollout(
        self,
        max_steps: int,
        policy: Callable[[TensorDictBase], TensorDictBase | None] | None = None,
        callback: Callable[[EnvBase, TensorDictBase], Any] | None = None,
        auto_reset: bool = True,
        auto_cast_to_device: bool = False,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool = False,
        return_contiguous: bool = True,
        tensordict: TensorDictBase | None = None,
    ) -> TensorDictBase:
        """Runs up to ``max_steps`` steps and returns them stacked along a last (time) dim.

        Args:
            max_steps: the number of steps at most.
            policy: a callable writing the action into a TensorDict (a ``TensorDictModule``);
                random actions from the action spec when ``None``.
            callback: called as ``callback(env, transition)`` after every step.
            auto_reset: reset the env first; when ``False``, ``tensordict`` is the first input.
            auto_cast_to_device: move data to the policy's device and back around each call.
            break_when_any_done: stop after the first step where any sub-env is done (default
                ``True`` unless ``break_when_all_done``). When ``False``, finished sub-envs are
                reset in place and the rollout goes on.
            break_when_all_done: reset finished sub-envs and stop once every sub-env has
                finished at least one episode.
            return_contiguous: stack into one TensorDict (``False``: a lazy stack).
            tensordict: the input of the first ``reset`` (or the first step, see ``auto_reset``);
                not modified.

        Returns:
            A TensorDict of batch ``[*batch_size, T]``, ``T <= max_steps``.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv(batch_size=[4])
            >>> env.rollout(5).batch_size
            torch.Size([4, 5])
        """
        if break_when_any_done is None:
            break_when_any_done = not break_when_all_done
        elif break_when_any_done and break_when_all_done:
            raise ValueError("break_when_any_done and break_when_all_done cannot both be True")
        if max_steps < 1:
            raise ValueError(f"rollout needs max_steps >= 1, got {max_steps}")
        if auto_reset:
            td = self.reset(tensordict.copy() if tensordict is not None else None)
        else:
            if tensordict is None:
                raise ValueError("rollout(auto_reset=False) needs a tensordict to start from")
            td = tensordict.copy()
        if policy is None:
            policy = self.rand_action
        elif auto_cast_to_device:
            policy = _cast_policy(policy, self._device)
        cache = self._cache or self._spec_cache()
        groups = cache.done_groups
        step = self.step
        tds = StepStore(lazy=not return_contiguous)
        if break_when_any_done:
            plan = cache.mdp_plan
            for i in range(max_steps):
                out = policy(td)
                if out is not None:
                    td = out
                td = step(td)
                tds.append(td)
                if callback is not None:
                    callback(self, td)
                next_td = entries(td)[NEXT] if type(td) is TensorDict else td.get(NEXT)
                if i + 1 == max_steps or groups.any_done(next_td):
                    break
                td = apply_mdp_plan(td, plan)
        else:
            seen = None
            step_and_reset = self.step_and_maybe_reset
            for _ in range(max_steps):
                out = policy(td)
                if out is not None:
                    td = out
                transition, td = step_and_reset(td)
                tds.append(transition)
                if callback is not None:
                    callback(self, transition)
                if break_when_all_done:
                    flags = groups.done_per_env(transition.get(NEXT))
                    seen = flags if seen is None else seen | flags
                    if seen.all():
                        break
        return tds.result(return_contiguous)

    # ------------------------------------------------------------------------------ helpers
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int:
        """Seeds the env and returns the seed for the next env of a chain.

        Args:
            seed: the seed; ``None`` draws one from torch's global generator (so that
                ``torch.manual_seed`` makes it reproducible).
            static_seed: return ``seed`` itself instead of a new one.

        Returns:
            A new seed derived from ``seed`` (distinct seeds for chained envs), or ``seed``.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv()
            >>> next_seed = env.set_seed(0)
            >>> next_seed != 0, env.set_seed(0) == next_seed
            (True, True)
        """
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self._set_seed(int(seed))
        return int(seed) if static_seed else next_seed(int(seed))

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes random actions drawn from the action spec.

        Args:
            tensordict: where to write them (a new TensorDict when ``None``).

        Returns:
            ``tensordict`` with the action entries.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> PendulumEnv(batch_size=[2]).rand_action()["action"].shape
            torch.Size([2, 1])
        """
        if tensordict is None:
            tensordict = TensorDict(batch_size=self._batch_size, device=self._device)
        cache = self._cache or self._spec_cache()
        batch = tensordict.batch_size
        lead = None if batch == self._batch_size else leading_shape(batch, self._batch_size)
        if cache.action_leaf is not None and cache.action_key is not None:
            fast = cache.action_rand if lead is None else None
            value = fast() if fast is not None else cache.action_leaf.rand(lead)
            set_leaf(tensordict, cache.action_key, value)
        elif cache.action_keys:
            tensordict.update(self.full_action_spec.rand(lead))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Makes one step with random actions.

        Args:
            tensordict: the step's input (a new TensorDict when ``None``).

        Returns:
            The transition, with ``"next"``.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv()
            >>> "next" in env.rand_step(env.reset()).keys()
            True
        """
        return self.step(self.rand_action(tensordict))

    def fake_tensordict(self) -> TensorDictBase:
        """Returns a transition of zeros built from the specs alone (no env call).

        Returns:
            A TensorDict of batch ``[*batch_size]`` with observations, states, actions and done
            flags at the root, and observations, rewards and done flags under ``"next"``.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> fake = PendulumEnv(batch_size=[2]).fake_tensordict()
            >>> fake["next", "reward"].shape
            torch.Size([2, 1])
        """
        root = TensorDict(batch_size=self._batch_size, device=self._device)
        for name in ("full_state_spec", "full_observation_spec", "full_done_spec"):
            root.update(getattr(self, name).zero())
        root.update(self.full_action_spec.zero())
        nxt = TensorDict(batch_size=self._batch_size, device=self._device)
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            nxt.update(getattr(self, name).zero())
        root.set(NEXT, nxt)
        return root

    def to(self, *args: Any, **kwargs: Any) -> EnvBase:
        """Moves the env, its specs and its parameters to a device.

        Args:
            *args: a device (as for ``nn.Module.to``; dtypes are not supported).
            **kwargs: ``device=...``.

        Returns:
            The env itself.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> PendulumEnv().to("cpu").action_spec.device
            device(type='cpu')
        """
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            raise TypeError(f"{type(self).__name__}.to() moves between devices only, not dtypes")
        if device is None:
            return self
        device = _make_device(device)
        self._output_spec = self._output_spec.to(device)
        self._input_spec = self._input_spec.to(device)
        self._device = device
        self.empty_cache()
        return super().to(device)

    def close(self) -> None:
        """Releases the env's resources; calling it again does nothing.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> env = PendulumEnv()
            >>> env.close(); env.close()
            >>> env.is_closed
            True
        """
        if self._closed:
            return
        self._closed = True
        self._close()

    def __enter__(self) -> EnvBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        lines = [
            f"batch_size={list(self._batch_size)}",
            f"device={self._device}",
            f"observation_spec={_spec_summary(self.full_observation_spec)}",
            f"action_spec={_spec_summary(self.full_action_spec)}",
            f"reward_spec={_spec_summary(self.full_reward_spec)}",
            f"done_spec={_spec_summary(self.full_done_spec)}",
        ]
        if self.state_keys:
            lines.append(f"state_spec={_spec_summary(self.full_state_spec)}")
        body = ",\n    ".join(lines)
        return f"{type(self).__name__}(\n    {body})"


def next_seed(seed: int) -> int:
    """The seed of the next env of a chain (what ``EnvBase.set_seed`` returns).

    splitmix64: a cheap bijective mix, so chains ``seed -> next -> next`` never repeat early.

    Examples:
        >>> from torchrl.envs.common import next_seed
        >>> next_seed(0) != 0, next_seed(0) == next_seed(0)
        (True, True)
    """
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) % (2**32 - 1)


def _make_device(device: DeviceLike) -> torch.device | None:
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _single_or_all(spec: Composite) -> TensorSpec:
    keys = list(spec.keys(include_nested=True, leaves_only=True))
    return spec[keys[0]] if len(keys) == 1 else spec


def _only(keys: list[NestedKey], what: str) -> NestedKey:
    if len(keys) != 1:
        raise KeyError(f"the env has {len(keys)} {what} keys ({keys}); use env.{what}_keys")
    return keys[0]


def _spec_summary(spec: Composite) -> str:
    """``{key: (shape) dtype, ...}`` over the leaves of ``spec``, for ``EnvBase.__repr__``."""
    items = [
        f"{k!r}: {tuple(spec[k].shape)} {spec[k].dtype}"
        for k in spec.keys(include_nested=True, leaves_only=True)
    ]
    return "{" + ", ".join(items) + "}"


def _cast_policy(
    policy: Callable[[TensorDictBase], TensorDictBase | None], env_device: torch.device | None
) -> Callable[[TensorDictBase], TensorDictBase]:
    """``policy`` called on its parameters' device, its output moved back to the env's."""
    params = policy.parameters() if isinstance(policy, nn.Module) else iter(())
    first = next(iter(params), None)
    if first is None:
        return policy  # type: ignore[return-value]
    policy_device = first.device

    def call(td: TensorDictBase) -> TensorDictBase:
        out = policy(td.to(policy_device))
        out = td if out is None else out
        return out.to(env_device) if env_device is not None else out

    return call
