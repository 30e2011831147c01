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

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np
import torch

from torchrl._types import DeviceLike
from torchrl._utils import import_optional
from torchrl.data.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded

__all__ = [
    "flat_batch",
    "jax_input",
    "jax_to_torch",
    "leaf_spec",
    "torch_dtype_of_jax",
    "torch_to_jax",
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
