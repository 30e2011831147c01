"""Brax (jax physics) environments behind the torchrl env contract, optionally differentiable.

The brax ``State`` pytree travels in the TensorDict under ``"state"`` (one entry per leaf, named
after its path: ``("state", "pipeline_state", "q")``), so that a step is a pure function of its
input, partial resets are a ``torch.where`` on the leaves, and gradients can flow from rewards
back to earlier actions through the states. Arrays cross between jax and torch through dlpack,
without copies. ``reset`` and ``step`` are jitted once per env (so once per batch size);
the first call of each compiles (seconds).

Differentiable mode (``requires_grad=True``) steps through :class:`_BraxStep`, a torch autograd
Function whose forward runs a jitted ``jax.vjp`` of the step and keeps the vjp closure, and whose
backward feeds the output cotangents to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Composite, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import torch_dtype_of

__all__ = ["BraxEnv", "BraxWrapper"]

_has_brax = has_module("brax")

STATE = "state"


def _jax() -> Any:
    """Imports jax and ``brax.envs`` (the package that holds brax's ``Env`` and registry)."""
    import_optional("jax", extra="brax")
    return import_optional("brax.envs", extra="brax")


def _to_jax(tensor: torch.Tensor) -> Any:
    import jax

    return jax.dlpack.from_dlpack(tensor.detach().contiguous())


def _to_torch(array: Any) -> torch.Tensor:
    return torch.from_dlpack(array)


def _path_key(path: Sequence[Any]) -> tuple[str, ...]:
    """A TensorDict key for a pytree path (attribute names, dict keys, sequence indices)."""
    parts = []
    for entry in path:
        for attr in ("name", "key", "idx"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return (STATE, *parts)


class _BraxStep(torch.autograd.Function):
    """One differentiable brax step: ``(action, *float_leaves) -> (*new_leaves)``.

    Integer leaves of the state are carried along without gradients.
    """

    @staticmethod
    def forward(ctx: Any, env: BraxWrapper, int_leaves: list, action: torch.Tensor, *floats: Any):  # type: ignore[override]
        new_floats, new_ints, vjp_fn = env._fwd(
            [_to_jax(t) for t in floats], [_to_jax(t) for t in int_leaves], _to_jax(action)
        )
        ctx.vjp_fn = vjp_fn
        ctx.env = env
        ctx.out_specs = [(tuple(x.shape), x.dtype) for x in new_floats]
        outs = [_to_torch(x) for x in new_floats]
        ints = [_to_torch(x) for x in new_ints]
        if ints:
            ctx.mark_non_differentiable(*ints)
        return (*outs, *ints)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        import jax.numpy as jnp

        n = len(ctx.out_specs)
        cotangents = [
            jnp.zeros(shape, dtype) if g is None else _to_jax(g)
            for g, (shape, dtype) in zip(grads[:n], ctx.out_specs)
        ]
        g_floats, g_action = ctx.env._bwd(ctx.vjp_fn, cotangents)
        return (None, None, _to_torch(g_action), *[_to_torch(g) for g in g_floats])


class BraxWrapper(EnvBase):
    """Wraps a brax env (``brax.envs.get_environment(...)``) behind the torchrl env contract.

    Entries: ``"observation"`` (float32 ``[*B, obs_size]``), ``"action"`` (``[-1, 1]``, float32
    ``[*B, action_size]``), ``"reward"`` ``[*B, 1]``, the done flags (brax's ``done``, split
    into ``truncated`` where the env reports ``info["truncation"]``), and the brax state under
    ``"state"``. ``requires_grad=True`` makes steps differentiable: rewards and observations
    carry gradients back to the actions (and earlier states) through the simulator.

    Args:
        env: a brax ``Env``.
        batch_size: ``[]`` for one env or ``[n]`` for ``n`` envs simulated together (vmap).
        requires_grad: step through ``jax.vjp`` so that torch autograd flows through steps.
        seed: the seed of the jax random key (default: drawn from torch's generator).
        device: the device of the tensors (jax's default device must match; CPU here).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> from brax import envs  # doctest: +SKIP
        >>> from torchrl.envs.libs.brax import BraxWrapper
        >>> raw = envs.get_environment("inverted_pendulum")  # doctest: +SKIP
        >>> env = BraxWrapper(raw, batch_size=[2], seed=0)  # compiles: slow  # doctest: +SKIP
        >>> env.rollout(3)["next", "observation"].shape  # doctest: +SKIP
        torch.Size([2, 3, 4])
    """

    def __init__(
        self,
        env: Any = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        requires_grad: bool = False,
        *,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        if not isinstance(env, _jax().Env):
            raise TypeError(f"BraxWrapper needs a brax Env, got {type(env).__name__}")
        batch = torch.Size(batch_size or [])
        if len(batch) > 1:
            raise ValueError(
                f"BraxWrapper supports batch sizes [] and [n], got {list(batch)}; stack envs "
                f"with a flat batch and reshape the data"
            )
        super().__init__(
            device=device,
            batch_size=batch,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self.requires_grad = bool(requires_grad)
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()))
        self._build()
        self._set_seed(seed)
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped brax env."""
        return self._env

    # ---------------------------------------------------------------------------- jax functions
    def _build(self) -> None:
        import jax

        env, batch = self._env, self.batch_size
        if batch:
            n = batch[0]
            reset_one, step_one = jax.vmap(env.reset), jax.vmap(env.step)

            def make_keys(key: Any) -> Any:
                return jax.random.split(key, n)
        else:
            reset_one, step_one = env.reset, env.step

            def make_keys(key: Any) -> Any:
                return key

        def reset(key: Any) -> tuple[Any, list[Any]]:
            key, sub = jax.random.split(key)
            return key, jax.tree_util.tree_leaves(reset_one(make_keys(sub)))

        shapes = jax.eval_shape(lambda k: reset_one(make_keys(k)), jax.random.PRNGKey(0))
        paths, treedef = jax.tree_util.tree_flatten_with_path(shapes)
        self._treedef = treedef
        self._leaf_keys = [_path_key(p) for p, _ in paths]
        self._leaf_shapes = [(tuple(s.shape), s.dtype) for _, s in paths]
        self._float_idx = [
            i for i, (_, s) in enumerate(paths) if jax.numpy.issubdtype(s.dtype, jax.numpy.floating)
        ]
        self._int_idx = [i for i in range(len(paths)) if i not in self._float_idx]
        names = [k[1:] for k in self._leaf_keys]
        self._obs_i = names.index(("obs",))
        self._reward_i = names.index(("reward",))
        self._done_i = names.index(("done",))
        self._trunc_i = (
            names.index(("info", "truncation")) if ("info", "truncation") in names else None
        )
        float_idx, int_idx = self._float_idx, self._int_idx

        def step(leaves: list[Any], action: Any) -> list[Any]:
            state = treedef.unflatten(leaves)  # type: ignore[attr-defined]
            return jax.tree_util.tree_leaves(step_one(state, action))

        def merge(floats: list[Any], ints: list[Any]) -> list[Any]:
            leaves: list[Any] = [None] * (len(floats) + len(ints))
            for i, x in zip(float_idx, floats):
                leaves[i] = x
            for i, x in zip(int_idx, ints):
                leaves[i] = x
            return leaves

        def fwd(
            floats: list[Any], ints: list[Any], action: Any
        ) -> tuple[list[Any], list[Any], Callable[..., Any]]:
            def f(fl: list[Any], a: Any) -> tuple[list[Any], list[Any]]:
                out = step(merge(fl, ints), a)
                return [out[i] for i in float_idx], [out[i] for i in int_idx]

            new_floats, vjp_fn, new_ints = jax.vjp(f, floats, action, has_aux=True)
            return new_floats, new_ints, vjp_fn

        def bwd(vjp_fn: Callable[[list[Any]], Any], cotangents: list[Any]) -> Any:
            return vjp_fn(cotangents)

        self._reset_fn = jax.jit(reset)
        self._step_fn = jax.jit(step)
        self._fwd = jax.jit(fwd)
        self._bwd = jax.jit(bwd)

    def _make_specs(self) -> None:
        device, batch = self.device, self.batch_size
        env = self._env
        state = Composite(shape=batch, device=device)
        for key, (shape, dtype) in zip(self._leaf_keys, self._leaf_shapes):
            torch_dtype = torch_dtype_of(dtype)
            state[key[1:]] = Unbounded(shape=shape, dtype=torch_dtype, device=device)
        self.observation_spec = Composite(
            {
                OBSERVATION: Unbounded(
                    shape=(*batch, env.observation_size), dtype=torch.float32, device=device
                ),
                STATE: state,
            },
            shape=batch,
            device=device,
        )
        self.action_spec = Bounded(
            -1.0, 1.0, shape=(*batch, env.action_size), dtype=torch.float32, device=device
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        import jax

        self._key = jax.random.PRNGKey(int(seed or 0))

    def _output(self, leaves: list[torch.Tensor], with_reward: bool) -> TensorDictBase:
        state = TensorDict(batch_size=self.batch_size, device=self.device)
        for key, leaf in zip(self._leaf_keys, leaves):
            state.set(key[1:], leaf)
        shape = (*self.batch_size, 1)
        done = leaves[self._done_i].detach().reshape(shape) != 0
        if self._trunc_i is not None:
            truncated = done & (leaves[self._trunc_i].detach().reshape(shape) != 0)
        else:
            truncated = torch.zeros_like(done)
        data: dict[Any, Any] = {
            OBSERVATION: leaves[self._obs_i],
            STATE: state,
            DONE: done,
            TERMINATED: done & ~truncated,
            TRUNCATED: truncated,
        }
        if with_reward:
            data[REWARD] = leaves[self._reward_i].reshape(shape)
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        # every sub-env gets a new state; EnvBase keeps the old one where "_reset" is False
        self._key, leaves = self._reset_fn(self._key)
        return self._output([_to_torch(x) for x in leaves], with_reward=False)

    def _read_state(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        state = tensordict.get(STATE, None)
        if state is None:
            raise KeyError(
                f"{type(self).__name__}.step: the input has no {STATE!r} entry (the brax state "
                f"written by reset and carried to the next step by step_mdp)"
            )
        return [state.get(key[1:]) for key in self._leaf_keys]

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        leaves = self._read_state(tensordict)
        action = tensordict.get(ACTION)
        if self.requires_grad:
            floats = [leaves[i] for i in self._float_idx]
            ints = [leaves[i] for i in self._int_idx]
            outs = _BraxStep.apply(self, ints, action, *floats)
            new: list[Any] = [None] * len(leaves)
            for i, t in zip(self._float_idx + self._int_idx, outs):
                new[i] = t
        else:
            out = self._step_fn([_to_jax(t) for t in leaves], _to_jax(action))
            new = [_to_torch(x) for x in out]
        return self._output(new, with_reward=True)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={self.batch_size}, "
            f"requires_grad={self.requires_grad}, device={self.device})"
        )


class BraxEnv(BraxWrapper):
    """Builds a brax env by name (``brax.envs.get_environment``) and wraps it.

    See :class:`BraxWrapper`. Extra keyword arguments go to the env's constructor.

    Args:
        env_name: the brax env, e.g. ``"inverted_pendulum"``, ``"ant"``.
        batch_size: see :class:`BraxWrapper`.
        backend: the physics pipeline: ``"generalized"``, ``"positional"``, ``"spring"`` or
            ``"mjx"``.
        requires_grad: see :class:`BraxWrapper`.
        seed: see :class:`BraxWrapper`.
        device: see :class:`BraxWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).
        **kwargs: passed to the env.

    Examples:
        >>> from torchrl.envs.libs.brax import BraxEnv
        >>> env = BraxEnv("inverted_pendulum", batch_size=[4])  # doctest: +SKIP
        >>> env.rollout(2)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 2, 1])
    """

    def __init__(
        self,
        env_name: str,
        batch_size: Sequence[int] | torch.Size | None = None,
        backend: str = "generalized",
        requires_grad: bool = False,
        *,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        envs = _jax()
        try:
            env = envs.get_environment(env_name, backend=backend, **kwargs)
        except KeyError as err:
            raise ValueError(f"BraxEnv: brax has no env named {env_name!r}") from err
        super().__init__(
            env,
            batch_size=batch_size,
            requires_grad=requires_grad,
            seed=seed,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
        self.backend = backend

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.env_name}, backend={self.backend}, "
            f"batch_size={self.batch_size}, requires_grad={self.requires_grad}, "
            f"device={self.device})"
        )
