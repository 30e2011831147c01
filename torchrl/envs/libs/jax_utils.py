"""Moving data between JAX and torch without host copies, and JAX pytrees as TensorDict entries.

The JAX-based suites (jumanji, gymnax, craftax) are pure functions of a state pytree. Their
wrappers flatten that pytree into TensorDict leaves named after the pytree paths, pass arrays
through DLPack (the torch tensor and the JAX array share one buffer), and rebuild the pytree
from the leaves on the next step. This module holds those pieces; it imports JAX only inside
the functions that need it.

DLPack is zero-copy on CPU for contiguous tensors of the dtypes both libraries know (bool,
signed and unsigned integers, floats). A non-contiguous tensor is made contiguous first (a
copy), and a 64-bit tensor handed to JAX without ``jax_enable_x64`` is narrowed by JAX (a
copy): cast actions to the JAX dtype before crossing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import import_optional
from torchrl.data.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase

__all__ = [
    "STATE",
    "JaxStateEnv",
    "flat_batch",
    "jax_input",
    "jax_to_torch",
    "leaf_spec",
    "torch_dtype_of_jax",
    "torch_to_jax",
    "tree_layout",
    "tree_leaf_keys",
    "tree_spec",
    "where_leaves",
]


def torch_to_jax(tensor: torch.Tensor) -> Any:
    """A JAX array sharing the memory of ``tensor`` (via DLPack).

    The tensor is detached; a non-contiguous one is copied into a contiguous buffer first.

    Args:
        tensor: a CPU tensor (or one on the device JAX uses).

    Returns:
        A ``jax.Array`` with the tensor's shape and dtype.

    Examples:
        >>> import torch
        >>> from torchrl.envs.libs.jax_utils import torch_to_jax
        >>> x = torch.arange(4.0)
        >>> torch_to_jax(x).shape  # doctest: +SKIP
        (4,)
    """
    import_optional("jax")
    import jax

    return jax.dlpack.from_dlpack(tensor.detach().contiguous())


def jax_input(tensor: torch.Tensor) -> Any:
    """``tensor`` as an argument of a jitted JAX function, without a copy where possible.

    A CPU tensor becomes a numpy view: jitted functions take numpy arguments through their fast
    C++ path (about 20 us per argument here, against about 130 us for ``jax.dlpack.from_dlpack``)
    and read aligned CPU buffers in place. Tensors on other devices go through DLPack.

    Args:
        tensor: the tensor (detached first).

    Returns:
        A numpy array (CPU) or a ``jax.Array``.

    Examples:
        >>> import torch
        >>> from torchrl.envs.libs.jax_utils import jax_input
        >>> x = torch.arange(3)
        >>> a = jax_input(x)
        >>> a.shape, a.ctypes.data == x.data_ptr()
        ((3,), True)
    """
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        return tensor.numpy()
    return torch_to_jax(tensor)


def jax_to_torch(array: Any, device: DeviceLike = None) -> torch.Tensor:
    """A torch tensor sharing the memory of a JAX array (via DLPack).

    JAX arrays are immutable: write into the returned tensor only if nothing on the JAX side
    still uses the array (the wrappers never do).

    Args:
        array: a ``jax.Array``.
        device: move the tensor there when it is elsewhere (a copy); ``None`` keeps it.

    Returns:
        A tensor with the array's shape and dtype.

    Examples:
        >>> import jax.numpy as jnp  # doctest: +SKIP
        >>> from torchrl.envs.libs.jax_utils import jax_to_torch
        >>> jax_to_torch(jnp.ones(3)).dtype  # doctest: +SKIP
        torch.float32
    """
    tensor = torch.from_dlpack(array)
    if device is not None and tensor.device != torch.device(device):
        tensor = tensor.to(device)
    return tensor


def torch_dtype_of_jax(dtype: Any) -> torch.dtype:
    """The torch dtype of a JAX/numpy dtype (``jnp.int32`` -> ``torch.int32``).

    Examples:
        >>> import numpy as np
        >>> from torchrl.envs.libs.jax_utils import torch_dtype_of_jax
        >>> torch_dtype_of_jax(np.dtype("uint32"))
        torch.uint32
        >>> torch_dtype_of_jax(np.bool_)
        torch.bool
    """
    return torch.from_numpy(np.zeros((), dtype=np.dtype(dtype))).dtype


def tree_leaf_keys(paths: Sequence[Sequence[Any]]) -> list[tuple[str, ...]]:
    """TensorDict keys for pytree leaves, from the paths of ``jax.tree_util.tree_flatten_with_path``.

    A path entry is a named-tuple or dataclass field (its name), a dict key (the key) or a
    sequence index (the index as a string).

    Args:
        paths: one path (a sequence of JAX key entries) per leaf.

    Returns:
        One tuple of strings per leaf; an empty path (the tree is a single array) gives ``()``.

    Examples:
        >>> from collections import namedtuple
        >>> import jax  # doctest: +SKIP
        >>> from torchrl.envs.libs.jax_utils import tree_leaf_keys
        >>> Obs = namedtuple("Obs", ["grid", "mask"])
        >>> tree = {"obs": Obs(1, [2, 3])}
        >>> paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]  # doctest: +SKIP
        >>> tree_leaf_keys(paths)  # doctest: +SKIP
        [('obs', 'grid'), ('obs', 'mask', '0'), ('obs', 'mask', '1')]
    """
    keys = []
    for path in paths:
        parts = []
        for entry in path:
            for attr in ("name", "key", "idx"):
                if hasattr(entry, attr):
                    parts.append(str(getattr(entry, attr)))
                    break
            else:
                parts.append(str(entry))
        keys.append(tuple(parts))
    return keys


def flat_batch(batch_size: Sequence[int]) -> int | None:
    """The number of sub-envs to ``vmap`` over: ``prod(batch_size)``, or ``None`` for ``[]``.

    Examples:
        >>> from torchrl.envs.libs.jax_utils import flat_batch
        >>> flat_batch([2, 3]), flat_batch([])
        (6, None)
    """
    return prod(batch_size) if len(batch_size) else None


def leaf_spec(
    shape: Sequence[int],
    dtype: Any,
    batch_size: Sequence[int],
    device: DeviceLike = None,
    low: Any = None,
    high: Any = None,
    num_values: int | None = None,
) -> TensorSpec:
    """The spec of one array of a JAX env, batched: shape ``[*batch_size, *shape]``.

    Booleans are ``Categorical(2, dtype=torch.bool)``; ``num_values`` makes an integer array
    ``Categorical``; finite ``low``/``high`` make it ``Bounded``; anything else is
    ``Unbounded``.

    Args:
        shape: the array's shape for one env.
        dtype: its JAX/numpy dtype.
        batch_size: the env's batch size.
        device: the spec's device.
        low: lower bounds (a number or an array broadcastable to ``shape``), or ``None``.
        high: upper bounds, or ``None``.
        num_values: for a discrete array, the number of values ``{0, ..., num_values - 1}``.

    Returns:
        A leaf spec.

    Examples:
        >>> import numpy as np
        >>> from torchrl.envs.libs.jax_utils import leaf_spec
        >>> leaf_spec((4,), np.bool_, [2]).shape
        torch.Size([2, 4])
        >>> leaf_spec((), np.int32, [2], num_values=5).n
        5
        >>> type(leaf_spec((3,), np.float32, [], low=0.0, high=1.0)).__name__
        'Bounded'
    """
    torch_dtype = torch_dtype_of_jax(dtype)
    full = (*batch_size, *shape)
    if torch_dtype == torch.bool:
        return Categorical(2, shape=full, dtype=torch.bool, device=device)
    if num_values is not None and not torch_dtype.is_floating_point:
        return Categorical(int(num_values), shape=full, dtype=torch_dtype, device=device)
    if low is not None and high is not None:
        lo = torch.as_tensor(np.broadcast_to(np.asarray(low), tuple(shape)).copy())
        hi = torch.as_tensor(np.broadcast_to(np.asarray(high), tuple(shape)).copy())
        if torch_dtype.is_floating_point:
            lo, hi = lo.to(torch.float64), hi.to(torch.float64)
        if bool(torch.isfinite(lo.double()).all()) and bool(torch.isfinite(hi.double()).all()):
            expand = (*batch_size, *shape)
            return Bounded(
                lo.expand(expand).to(torch_dtype),
                hi.expand(expand).to(torch_dtype),
                shape=full,
                dtype=torch_dtype,
                device=device,
            )
    return Unbounded(shape=full, dtype=torch_dtype, device=device)


def where_leaves(mask: Any, new: Sequence[Any], old: Sequence[Any | None]) -> list[Any]:
    """``jnp.where(mask, new, old)`` leaf by leaf, ``mask`` broadcast over each leaf's trailing dims.

    A JAX function (call it inside ``jax.jit``): the partial reset of a batched JAX env in one
    call, instead of one ``torch.where`` per TensorDict leaf.

    Args:
        mask: boolean ``[n]``, ``True`` where the new value wins.
        new: the new leaves, each ``[n, ...]``.
        old: the old leaves (``None``: keep the new leaf everywhere).

    Returns:
        The merged leaves.

    Examples:
        >>> import jax.numpy as jnp  # doctest: +SKIP
        >>> from torchrl.envs.libs.jax_utils import where_leaves
        >>> where_leaves(jnp.array([True, False]), [jnp.ones((2, 3))], [jnp.zeros((2, 3))])[0][:, 0]  # doctest: +SKIP
        Array([1., 0.], dtype=float32)
    """
    import jax.numpy as jnp

    out = []
    for n, o in zip(new, old):
        if o is None:
            out.append(n)
        else:
            m = mask.reshape(mask.shape + (1,) * (n.ndim - mask.ndim))
            out.append(jnp.where(m, n, o.astype(n.dtype)))
    return out


def tree_spec(
    keys: Sequence[tuple[str, ...]],
    shapes: Sequence[tuple[tuple[int, ...], Any]],
    batch_size: Sequence[int],
    device: DeviceLike = None,
) -> Composite:
    """A ``Composite`` of ``Unbounded`` leaves for a flattened pytree (its keys and per-env shapes).

    Args:
        keys: the leaf keys (see :func:`tree_leaf_keys`).
        shapes: ``(shape, dtype)`` of each leaf for one env.
        batch_size: the env's batch size.
        device: the spec's device.

    Returns:
        A nested ``Composite`` of batch ``batch_size``.

    Examples:
        >>> import numpy as np
        >>> from torchrl.envs.libs.jax_utils import tree_spec
        >>> spec = tree_spec([("a", "b"), ("c",)], [((2,), np.float32), ((), np.uint32)], [3])
        >>> spec["a", "b"].shape, spec["c"].dtype
        (torch.Size([3, 2]), torch.uint32)
    """
    spec = Composite(shape=batch_size, device=device)
    for key, (shape, dtype) in zip(keys, shapes):
        spec[key] = Unbounded(
            shape=(*batch_size, *shape), dtype=torch_dtype_of_jax(dtype), device=device
        )
    return spec


def tree_layout(tree: Any) -> tuple[list[tuple[str, ...]], list[tuple[tuple[int, ...], Any]]]:
    """The TensorDict key, and the ``(shape, dtype)``, of each leaf of a pytree, in leaf order.

    Args:
        tree: a pytree of arrays (or of ``jax.ShapeDtypeStruct`` from ``jax.eval_shape``).

    Returns:
        ``(keys, shapes)``: the keys as :func:`tree_leaf_keys` names them, and one
        ``(shape, dtype)`` pair per leaf.

    Examples:
        >>> import jax.numpy as jnp
        >>> keys, shapes = tree_layout({"a": jnp.zeros(2), "b": {"c": jnp.zeros((), jnp.int32)}})
        >>> keys
        [('a',), ('b', 'c')]
        >>> [(shape, str(dtype)) for shape, dtype in shapes]
        [((2,), 'float32'), ((), 'int32')]
    """
    import jax

    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    keys = tree_leaf_keys([p for p, _ in paths])
    return keys, [(tuple(x.shape), x.dtype) for _, x in paths]


STATE = "state"


def _put(root: dict[str, Any], key: tuple[str, ...], value: torch.Tensor) -> None:
    for part in key[:-1]:
        root = root.setdefault(part, {})
    root[key[-1]] = value


class JaxStateEnv(EnvBase):
    """The shared machinery of the wrappers of functional JAX envs (jumanji, gymnax, Craftax).

    A subclass describes one env (``_one_reset(key)`` and ``_one_step(carried, action)``, the
    flat output list ``_outputs(...)``, the layout and the specs); this class ``vmap``s and
    ``jit``s them over the flattened batch, carries the state pytree in the TensorDict under
    ``("state", ...)``, moves arrays through DLPack, merges partial resets inside JAX and
    seeds the JAX key. Each reset or step returns the arrays ``[*state leaves, *data leaves,
    reward, done, terminated, truncated]``, whose TensorDict keys :meth:`_output_keys` lists.

    A subclass calls ``super().__init__(...)``, sets what its layout needs, then
    :meth:`_build`, which calls its ``_layout`` (it sets ``_state_treedef``, ``_state_keys``,
    ``_state_shapes``, ``_obs_keys``, ``_obs_shapes``) and ``_make_specs``.

    Args:
        env: the wrapped JAX env.
        categorical_action_encoding: discrete actions as indices instead of one-hot vectors.
        batch_size: the batch of sub-envs simulated together (``vmap``); ``[]`` for one env.
        jit: compile reset and step with ``jax.jit``; assignable later (``env.jit = False``).
        frame_skip: repeat each action this many times (the subclass's ``_one_step`` does).
        device: where the tensors go.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.
    """

    # a partial reset merges the fresh and the kept sub-envs inside JAX (one call)
    _handles_partial_reset = True
    _state_keys: list[tuple[str, ...]]
    _obs_keys: list[tuple[str, ...]]
    _state_treedef: Any

    def __init__(
        self,
        env: Any,
        categorical_action_encoding: bool,
        *,
        batch_size: Sequence[int] | torch.Size | int | None,
        jit: bool,
        frame_skip: int,
        device: DeviceLike,
        allow_done_after_reset: bool,
        validate_actions: bool,
    ) -> None:
        if int(frame_skip) < 1:
            raise ValueError(f"{type(self).__name__}: frame_skip must be >= 1, got {frame_skip}")
        super().__init__(
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self.categorical_action_encoding = bool(categorical_action_encoding)
        self.frame_skip = int(frame_skip)
        self._n = flat_batch(self.batch_size)
        self._jit = bool(jit)

    def _build(self, seed: int | None) -> None:
        """Reads the layout, compiles, builds the specs and seeds (the end of ``__init__``)."""
        self._layout()
        self._out_keys = self._output_keys()
        self._compile()
        self._make_specs()
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()))
        self._set_seed(seed)

    @property
    def env(self) -> Any:
        """The wrapped JAX env."""
        return self._env

    @property
    def jit(self) -> bool:
        """Whether reset and step run compiled (``jax.jit``); assignable."""
        return self._jit

    @jit.setter
    def jit(self, value: bool) -> None:
        if bool(value) != self._jit:
            self._jit = bool(value)
            self._compile()

    # ------------------------------------------------------------------- the subclass's part
    def _layout(self) -> None:
        raise NotImplementedError

    def _make_specs(self) -> None:
        raise NotImplementedError

    def _one_reset(self, key: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def _one_step(self, carried: Any, action: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def _outputs(self, *parts: Any) -> list[Any]:
        raise NotImplementedError

    def _action_to_jax(self, action: torch.Tensor) -> torch.Tensor:
        """The torch action as it crosses to JAX (a dtype cast); identity by default."""
        return action

    def _data_keys(self) -> list[tuple[str, ...]]:
        """The keys of the arrays between the state leaves and the reward (the observation)."""
        return [tuple(k) for k in self._obs_keys]

    def _set_observation_layout(self, tree: Any, reserved: set[str]) -> None:
        """Sets ``_obs_keys``/``_obs_shapes`` from an observation pytree; checks the names."""
        self._obs_keys, self._obs_shapes = tree_layout(tree)
        if self._obs_keys == [()]:
            self._obs_keys = [(OBSERVATION,)]
        for key in self._obs_keys:
            if key[0] in reserved:
                raise ValueError(
                    f"{type(self).__name__}: the observation entry {key[0]!r} collides with a "
                    f"reserved torchrl key ({sorted(reserved)})"
                )

    # ---------------------------------------------------------------------------- jax functions
    def _batched(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import jax

        return fn if self._n is None else jax.vmap(fn)

    def _compile(self) -> None:
        import jax

        n = self._n
        batched_reset = self._batched(self._one_reset)
        batched_step = self._batched(self._one_step)

        def reset(key: Any) -> tuple[Any, list[Any]]:
            key, sub = jax.random.split(key)
            keys = sub if n is None else jax.random.split(sub, n)
            return key, self._outputs(*batched_reset(keys))

        def step(state_leaves: list[Any], action: Any) -> list[Any]:
            carried = jax.tree_util.tree_unflatten(self._state_treedef, state_leaves)
            return self._outputs(*batched_step(carried, action))

        def reset_where(key: Any, mask: Any, old: list[Any | None]) -> tuple[Any, list[Any]]:
            key, new = reset(key)
            return key, where_leaves(mask, new, old)

        self._reset_fn = jax.jit(reset) if self._jit else reset
        self._reset_where_fn = jax.jit(reset_where) if self._jit else reset_where
        self._step_fn = jax.jit(step) if self._jit else step

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        import jax

        self._key = jax.random.PRNGKey(int(seed or 0))

    def _to_torch(self, array: Any) -> torch.Tensor:
        tensor = jax_to_torch(array, self.device)
        if len(self.batch_size) > 1:
            tensor = tensor.reshape(*self.batch_size, *tensor.shape[1:])
        return tensor

    def _to_jax(self, tensor: torch.Tensor) -> Any:
        if len(self.batch_size) > 1:
            tensor = tensor.reshape(-1, *tensor.shape[len(self.batch_size) :])
        return jax_input(tensor)

    def _output_keys(self) -> list[Any]:
        """The TensorDict key of each array a reset or step returns (``None``: the reward)."""
        keys: list[Any] = [(STATE, *k) for k in self._state_keys]
        return [*keys, *self._data_keys(), None, DONE, TERMINATED, TRUNCATED]

    def _read(self, arrays: list[Any], with_reward: bool) -> TensorDictBase:
        data: dict[str, Any] = {}
        for key, array in zip(self._out_keys, arrays):
            if key is None:
                if with_reward:
                    data[REWARD] = self._to_torch(array)
            else:
                _put(data, key if isinstance(key, tuple) else (key,), self._to_torch(array))
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get(RESET, None)
        if tensordict is None or mask is None or bool(mask.all()):
            self._key, arrays = self._reset_fn(self._key)
            return self._read(arrays, with_reward=False)
        # a partial reset, merged inside JAX: the sub-envs left out keep their input's values
        old = [
            None
            if key is None or (value := tensordict.get(key, None)) is None
            else self._to_jax(value)
            for key in self._out_keys
        ]
        flat = self._to_jax(mask.reshape(*self.batch_size))
        self._key, arrays = self._reset_where_fn(self._key, flat, old)
        return self._read(arrays, with_reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state = tensordict.get(STATE, None)
        if state is None:
            raise KeyError(
                f"{type(self).__name__}.step: the input has no {STATE!r} entry (the env state "
                "written by reset and carried to the next step by step_mdp)"
            )
        leaves = [self._to_jax(state.get(key)) for key in self._state_keys]
        action = self._to_jax(self._action_to_jax(tensordict.get(ACTION)))
        return self._read(self._step_fn(leaves, action), with_reward=True)

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        # the state is in the input: stepping every sub-env is exact, EnvBase keeps the skipped
        return self._step(tensordict)

    def __repr__(self) -> str:
        name = getattr(self, "env_name", None) or type(self._env).__name__
        return (
            f"{type(self).__name__}(env={name}, batch_size={self.batch_size}, "
            f"jit={self._jit}, device={self.device})"
        )
