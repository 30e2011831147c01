"""``ModelBasedEnvBase``: an env whose step is a learned model (model-based RL, DESIGN.md §4).

The world model is any module that maps a TensorDict to a TensorDict (a ``TensorDictModule``,
a ``TensorDictSequential`` of a transition and a reward model, ...). A step runs it on a
shallow copy of the step's input, which holds the current state (the observation and state
entries) and the action, and reads what it wrote:

- the next state, under the observation keys themselves (the model overwrites the state it
  read, as TorchRL's model-based envs do) or under ``("next", key)``;
- the reward, under the reward keys (or ``("next", key)``);
- optionally the done flags (else nothing ever ends: the rollout length decides).

Nothing is detached and no input tensor is written in place, so a rollout run with gradients
on is differentiable end to end (policy, model, start states). The state travels in the
TensorDict: the env is batch-unlocked, any batch of start states can be rolled out, and
planners can roll out ``[*B, num_candidates]`` candidates at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl._keys import NEXT
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Composite, TensorSpec
from torchrl.envs.common import EnvBase

__all__ = ["ModelBasedEnvBase", "batched_spec"]

ParamsLike = TensorDictBase | Mapping[str, torch.Tensor] | Sequence[torch.Tensor]


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def batched_spec(spec: TensorSpec, batch_size: torch.Size, device: DeviceLike = None) -> TensorSpec:
    """The spec of one sub-env expanded to an env's batch size (and moved to its device).

    Args:
        spec: the spec of one sub-env (no batch dims), a leaf or a ``Composite``; a
            ``Composite`` whose shape already equals ``batch_size`` is taken as batched.
        batch_size: the env's batch size.
        device: where the env's tensors live (``None``: the spec's device).

    Returns:
        The spec of shape ``[*batch_size, *spec.shape]``.

    Examples:
        >>> import torch
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs.model_based.common import batched_spec
        >>> batched_spec(Unbounded(shape=(3,)), torch.Size([4])).shape
        torch.Size([4, 3])
    """
    if not isinstance(spec, TensorSpec):
        raise TypeError(f"expected a TensorSpec, got {type(spec).__name__}")
    if not (isinstance(spec, Composite) and spec.shape == batch_size) and len(batch_size):
        spec = spec.expand(*batch_size, *spec.shape)
    if device is not None:
        spec = spec.to(device)
    return spec


def _functional_state(
    module: nn.Module, params: ParamsLike | None, buffers: ParamsLike | None
) -> dict[str, torch.Tensor] | None:
    """``{name: tensor}`` for ``torch.func.functional_call`` (``None``: the module's own)."""
    if params is None and buffers is None:
        return None
    state: dict[str, torch.Tensor] = {}
    for given, what, named in (
        (params, "params", dict(module.named_parameters())),
        (buffers, "buffers", dict(module.named_buffers())),
    ):
        if given is None:
            continue
        if isinstance(given, TensorDictBase):
            items = dict(given.flatten_keys(".").items())
        elif isinstance(given, Mapping):
            items = dict(given)
        elif isinstance(given, Sequence):
            if len(given) != len(named):
                raise ValueError(
                    f"ModelBasedEnvBase: {what} has {len(given)} tensors but the world model has "
                    f"{len(named)} {what} ({list(named)})"
                )
            items = dict(zip(named, given))
        else:
            raise TypeError(
                f"ModelBasedEnvBase: {what} must be a TensorDict, a dict of tensors or a list of "
                f"tensors, got {type(given).__name__}"
            )
        unknown = [name for name in items if name not in named]
        if unknown:
            raise KeyError(
                f"ModelBasedEnvBase: {what} names {unknown}, which the world model does not "
                f"have (its {what}: {list(named)})"
            )
        state.update(items)
    return state


class ModelBasedEnvBase(EnvBase):
    """Base of the envs whose step runs a learned world model (see the module docstring).

    A subclass sets the specs (or calls :meth:`set_specs_from_env`) and may write
    :meth:`sample_start_states`. A reset takes its start states from the reset TensorDict when
    it holds every observation and state entry (``env.reset(td)``, ``env.rollout(n,
    tensordict=td)``), and from :meth:`sample_start_states` otherwise, including for the
    sub-envs that a partial reset (``"_reset"``) restarts. The env is batch-unlocked.

    Args:
        world_model: a module mapping a TensorDict (state and action) to one holding the next
            state, the reward and optionally the done flags.
        params: parameters to run the world model with instead of its own (a TensorDict such as
            ``TensorDict.from_module(world_model)``, a ``{name: tensor}`` dict, or a list in the
            order of ``world_model.parameters()``): gradients then flow to these tensors.
        buffers: the same for the world model's buffers.
        device: where the env's tensors live.
        batch_size: the batch size of a reset without input, e.g. ``[256]`` (default ``[]``).
        run_type_checks: check every reset and step output against the specs.
        allow_done_after_reset: do not raise when a start state is already done.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data import Composite, Unbounded
        >>> from torchrl.envs.model_based import ModelBasedEnvBase
        >>> class MyModelEnv(ModelBasedEnvBase):
        ...     def __init__(self, world_model):
        ...         super().__init__(world_model)
        ...         self.observation_spec = Composite(hidden=Unbounded(shape=(4,)))
        ...         self.action_spec = Unbounded(shape=(1,))
        >>> class Dynamics(torch.nn.Module):
        ...     def forward(self, hidden, action):
        ...         nxt = hidden + action
        ...         return nxt, -nxt.pow(2).sum(-1, keepdim=True)
        >>> model = TensorDictModule(Dynamics(), ["hidden", "action"], ["hidden", "reward"])
        >>> env = MyModelEnv(model)
        >>> starts = TensorDict(hidden=torch.zeros(5, 4), batch_size=[5])
        >>> env.rollout(3, tensordict=starts)["next", "reward"].shape
        torch.Size([5, 3, 1])
    """

    def __init__(
        self,
        world_model: nn.Module,
        params: ParamsLike | None = None,
        buffers: ParamsLike | None = None,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        run_type_checks: bool = False,
        *,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        if not isinstance(world_model, nn.Module):
            raise TypeError(
                f"{type(self).__name__}: world_model must be a torch.nn.Module mapping a "
                f"TensorDict to a TensorDict, got {type(world_model).__name__}"
            )
        self.world_model = world_model
        self._functional = _functional_state(world_model, params, buffers)
        self.batch_locked = False
        self._outputs: list[tuple[NestedKey, tuple[str, ...], torch.Size, bool]] | None = None
        self._hidden: list[NestedKey] = [NEXT]
        self._start_keys: list[NestedKey] | None = None
        self.generator = torch.Generator(device=self.device or "cpu")

    # ------------------------------------------------------------------------------- specs
    def empty_cache(self) -> None:
        """Forgets the key lists derived from the specs (after an in-place spec edit)."""
        super().empty_cache()
        self._outputs = None
        self._start_keys = None

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Copies the specs of ``env`` (a real env), re-batched to this env's batch size.

        Args:
            env: the env whose observation, state, action, reward and done specs to copy.

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from torchrl.envs import PendulumEnv
            >>> from torchrl.envs.model_based import WorldModelEnv
            >>> model = TensorDictModule(torch.nn.Identity(), ["observation"], ["observation"])
            >>> env = WorldModelEnv(model, batch_size=[8])
            >>> env.set_specs_from_env(PendulumEnv(batch_size=[2]))
            >>> env.action_spec.shape, env.observation_spec["observation"].shape
            (torch.Size([8, 1]), torch.Size([8, 3]))
        """
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"{type(self).__name__}.set_specs_from_env needs an EnvBase, got "
                f"{type(env).__name__}"
            )
        batch, device = self.batch_size, self.device
        self.full_observation_spec = batched_spec(
            env.full_observation_spec_unbatched, batch, device
        )
        self.full_state_spec = batched_spec(env.full_state_spec_unbatched, batch, device)
        self.full_action_spec = batched_spec(env.full_action_spec_unbatched, batch, device)
        self.full_reward_spec = batched_spec(env.full_reward_spec_unbatched, batch, device)
        self.full_done_spec = batched_spec(env.full_done_spec_unbatched, batch, device)

    def _output_plan(self) -> list[tuple[NestedKey, tuple[str, ...], torch.Size, bool]]:
        """``(key, tuple key, per-sub-env shape, is_done_flag)`` for every step output."""
        plan = self._outputs
        if plan is not None:
            return plan
        n = len(self.batch_size)
        if not self.action_keys:
            raise RuntimeError(
                f"{type(self).__name__} has no action spec: pass the specs to the constructor "
                "or call env.set_specs_from_env(real_env) first"
            )
        plan = []
        for spec, is_done in (
            (self.full_observation_spec, False),
            (self.full_reward_spec, False),
            (self.full_done_spec, True),
        ):
            for key in spec.keys(True, True):
                plan.append((key, _as_tuple(key), spec[key].shape[n:], is_done))
        self._check_model_keys(plan)
        # The model must not see (and seem to return) the done flags and rewards of the input.
        self._hidden = [NEXT, *self.done_keys, *self.reward_keys]
        self._outputs = plan
        return plan

    def _check_model_keys(self, plan: list[tuple[NestedKey, tuple[str, ...], torch.Size, bool]]):
        """Checks, when the world model lists its ``out_keys``, that it writes the outputs."""
        out_keys = getattr(self.world_model, "out_keys", None)
        if not isinstance(out_keys, (list, tuple)):
            return
        written = {_as_tuple(k) for k in out_keys}
        written |= {k[1:] for k in written if len(k) > 1 and k[0] == NEXT}
        reward_keys = {_as_tuple(k) for k in self.reward_keys}
        missing = [key for key, tkey, _, _ in plan if tkey in reward_keys and tkey not in written]
        if missing:
            raise KeyError(
                f"{type(self).__name__}: the world model does not write the reward key(s) "
                f"{missing} (nor under 'next'); its out_keys are {list(out_keys)}"
            )
        observed = [key for key in self.observation_keys if _as_tuple(key) in written]
        if self.observation_keys and not observed:
            raise KeyError(
                f"{type(self).__name__}: the world model writes none of the observation keys "
                f"{self.observation_keys} (nor under 'next'), so the state would never change; "
                f"its out_keys are {list(out_keys)}"
            )

    def _state_keys_to_start(self) -> list[NestedKey]:
        keys = self._start_keys
        if keys is None:
            keys = list(self.observation_keys)
            seen = {_as_tuple(k) for k in keys}
            keys += [k for k in self.state_keys if _as_tuple(k) not in seen]
            self._start_keys = keys
        return keys

    # ------------------------------------------------------------------------------ resets
    def sample_start_states(self, batch_size: torch.Size) -> TensorDictBase | None:
        """Start states for ``batch_size`` sub-envs, or ``None`` when the env has no sampler.

        Subclasses override it (a start-state distribution, a replay buffer, the zero state of
        a recurrent model). The result needs every observation and state entry, batch
        ``batch_size``; other entries are ignored.

        Args:
            batch_size: the batch size of the reset.

        Returns:
            A TensorDict of start states, or ``None``.
        """
        return None

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self._output_plan()  # raises now if the specs are incomplete
        keys = self._state_keys_to_start()
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        partial = tensordict is not None and any(
            tensordict.get(k, None) is not None for k in self.reset_keys
        )
        if tensordict is not None and not partial:
            present = [k for k in keys if tensordict.get(k, None) is not None]
            if len(present) == len(keys):
                return self._select_starts(tensordict, keys, batch, "the reset TensorDict")
        starts = self.sample_start_states(batch)
        if starts is None:
            if partial:
                raise RuntimeError(
                    f"{type(self).__name__}: a partial reset ('_reset') needs new start states "
                    "for the finished sub-envs, but this env has no start-state sampler; give "
                    "it one, or stop rollouts at the first done"
                )
            have = [] if tensordict is None else list(tensordict.keys(True, True))
            raise KeyError(
                f"{type(self).__name__}.reset needs start states: the reset TensorDict must hold "
                f"{keys} (it holds {have}), e.g. env.reset(td) or env.rollout(n, tensordict=td), "
                "or the env needs a start-state sampler"
            )
        if not isinstance(starts, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__}: the start-state sampler must return a TensorDict, got "
                f"{type(starts).__name__}"
            )
        return self._select_starts(starts, keys, batch, "the sampled start states")

    def _select_starts(
        self, source: TensorDictBase, keys: list[NestedKey], batch: torch.Size, where: str
    ) -> TensorDictBase:
        if source.batch_size != batch:
            raise ValueError(
                f"{type(self).__name__}: {where} have batch size {list(source.batch_size)}, "
                f"expected {list(batch)}"
            )
        n = len(self.batch_size)
        out = TensorDict(batch_size=batch, device=self.device)
        for key in keys:
            value = source.get(key, None)
            spec = self.full_observation_spec.get(key, None)
            if spec is None:
                spec = self.full_state_spec[key]
            if value is None:
                raise KeyError(
                    f"{type(self).__name__}: {where} lack the start-state entry {key!r} "
                    f"(expected {list(spec.shape[n:])} {spec.dtype}); they hold "
                    f"{list(source.keys(True, True))}"
                )
            if value.shape[len(batch) :] != spec.shape[n:] or value.dtype != spec.dtype:
                raise ValueError(
                    f"{type(self).__name__}: the start-state entry {key!r} of {where} has "
                    f"shape {list(value.shape)} and dtype {value.dtype}; expected "
                    f"{[*batch, *spec.shape[n:]]} and {spec.dtype}"
                )
            out.set(key, value)
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    # ------------------------------------------------------------------------------- steps
    def run_world_model(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the world model on ``tensordict`` (with ``params``/``buffers`` when given).

        Args:
            tensordict: the model's input; the model may write into it.

        Returns:
            What the model returned (``tensordict`` when it returned ``None``).
        """
        if self._functional is None:
            out = self.world_model(tensordict)
        else:
            out = torch.func.functional_call(self.world_model, self._functional, (tensordict,))
        return tensordict if out is None else out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        plan = self._output_plan()
        # A copy of the structure (not of the tensors): the model overwrites the state entries
        # of its input, which must keep the current state. "next", the done flags and rewards
        # are left out so that stale entries are never read back as the model's output.
        model_in = tensordict.exclude(*self._hidden).copy()
        out = self.run_world_model(model_in)
        nxt = out.get(NEXT, None)
        batch = tensordict.batch_size
        nb = len(batch)
        result = TensorDict(batch_size=batch, device=self.device)
        for key, tkey, shape, is_done in plan:
            value = None if nxt is None else nxt.get(tkey, None)
            if value is None:
                value = out.get(tkey, None)
            if value is None:
                if is_done:
                    continue  # the base writes all-False flags
                raise KeyError(
                    f"{type(self).__name__}: the world model wrote no {key!r} (nor "
                    f"('next', ...) of it); its output holds {list(out.keys(True, True))}"
                )
            if value.shape[nb:] != shape or value.shape[:nb] != batch:
                raise ValueError(
                    f"{type(self).__name__}: the world model's {key!r} has shape "
                    f"{list(value.shape)}, expected {[*batch, *shape]}"
                )
            if is_done and value.dtype != torch.bool:
                raise TypeError(
                    f"{type(self).__name__}: the world model's done flag {key!r} is "
                    f"{value.dtype}, expected torch.bool (threshold a predicted probability "
                    "inside the model)"
                )
            result.set(key, value)
        return result
