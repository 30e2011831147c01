"""gymnasium spaces on the torchrl side: space -> spec, gymnasium value -> tensor, tensor -> action.

Each function here runs once per env construction and returns a spec or a small closure; the
closures are what ``GymWrapper`` calls at every step, so they do no dispatch on the space there.
The module is private to :mod:`torchrl.envs.libs`; its names are the ones the gymnasium-based
wrappers there (gym, envpool, pettingzoo, vmas) share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from torchrl._keys import ACTION
from torchrl._types import DeviceLike
from torchrl._utils import import_optional
from torchrl.data.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.envs.common import EnvBase

__all__ = [
    "INVALID",
    "ToGym",
    "ToTensor",
    "gym_to_torchrl_spec_transform",
    "import_gymnasium",
    "make_checked_writer",
    "make_reader",
    "make_writer",
    "raise_if_bad_action",
    "tensor_from_array",
    "torch_dtype_of",
]

#: Turns a gymnasium value into a tensor, or a dict of them for Dict/Tuple spaces.
ToTensor = Callable[[Any], Any]
#: Turns an action tensor (a TensorDict for Dict/Tuple action spaces) into a gymnasium action.
ToGym = Callable[[Any], Any]


def import_gymnasium() -> ModuleType:
    """The ``gymnasium`` module; an ``ImportError`` naming the ``gym`` extra when it is missing."""
    return import_optional("gymnasium", extra="gym")


def torch_dtype_of(np_dtype: npt.DTypeLike) -> torch.dtype:
    """The torch dtype of a numpy dtype (``np.float64`` -> ``torch.float64``).

    Examples:
        >>> import numpy as np
        >>> from torchrl.envs.libs._gym_spaces import torch_dtype_of
        >>> torch_dtype_of(np.uint8)
        torch.uint8
    """
    return torch.from_numpy(np.zeros((), dtype=np_dtype)).dtype


def tensor_from_array(value: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy(value)`` (a view), or a copy when ``value`` has negative strides."""
    try:
        return torch.from_numpy(value)
    except ValueError:
        # negative strides (e.g. an image flipped with [::-1]) cannot be viewed by torch
        return torch.from_numpy(np.ascontiguousarray(value))


# --------------------------------------------------------------------------- spaces -> specs


def gym_to_torchrl_spec_transform(
    space: Any,
    device: DeviceLike = "cpu",
    categorical_action_encoding: bool = False,
    batch_size: Sequence[int] = (),
) -> TensorSpec:
    """Maps a gymnasium space to the torchrl spec that describes its values.

    Args:
        space: a ``gymnasium.spaces.Space`` (``Box``, ``Discrete``, ``MultiDiscrete``,
            ``MultiBinary``, ``Dict`` or ``Tuple``, nested freely).
        device: the device of the spec.
        categorical_action_encoding: if ``True``, ``Discrete`` spaces become
            :class:`~torchrl.data.Categorical` (an index of shape ``batch_size``) and
            ``MultiDiscrete`` ones :class:`~torchrl.data.MultiCategorical`; otherwise
            :class:`~torchrl.data.OneHot` (shape ``(*batch_size, n)``) and
            :class:`~torchrl.data.MultiOneHot`.
        batch_size: leading dimensions prepended to every leaf (``[num_envs]`` for a vector env
            described by its ``single_*_space``).

    Returns:
        A leaf spec for leaf spaces; a :class:`~torchrl.data.Composite` (with keys ``"0"``,
        ``"1"``, ... for a ``Tuple``) for ``Dict`` and ``Tuple`` spaces.

    Examples:
        >>> import gymnasium as gym
        >>> from torchrl.envs.libs.gym import gym_to_torchrl_spec_transform
        >>> spec = gym_to_torchrl_spec_transform(gym.spaces.Discrete(3), batch_size=[4])
        >>> type(spec).__name__, tuple(spec.shape)
        ('OneHot', (4, 3))
        >>> box = gym.spaces.Box(-1.0, 1.0, shape=(2,))
        >>> gym_to_torchrl_spec_transform(box).dtype
        torch.float32
    """
    spaces = import_gymnasium().spaces
    batch = tuple(batch_size)
    if isinstance(space, spaces.Box):
        dtype = torch_dtype_of(space.dtype)
        shape = (*batch, *space.shape)
        low = torch.as_tensor(space.low).to(dtype)
        high = torch.as_tensor(space.high).to(dtype)
        if dtype.is_floating_point and low.isinf().all() and high.isinf().all():
            return Unbounded(shape=shape, device=device, dtype=dtype)
        # partly infinite boxes (CartPole's velocities) stay Bounded: the finite bounds are
        # information, and Bounded.rand() draws finite values for the infinite ones
        return Bounded(
            low=low.expand(shape).clone(),
            high=high.expand(shape).clone(),
            shape=shape,
            device=device,
            dtype=dtype,
        )
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        if categorical_action_encoding:
            return Categorical(n, shape=batch, device=device, dtype=torch.int64)
        return OneHot(n, shape=(*batch, n), device=device)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = [int(v) for v in np.asarray(space.nvec).reshape(-1)]
        if np.asarray(space.nvec).ndim != 1:
            raise NotImplementedError(
                f"MultiDiscrete spaces with a multi-dimensional nvec are not supported: got {space}"
            )
        if categorical_action_encoding:
            return MultiCategorical(
                nvec, shape=(*batch, len(nvec)), device=device, dtype=torch.int64
            )
        return MultiOneHot(nvec, shape=(*batch, sum(nvec)), device=device)
    if isinstance(space, spaces.MultiBinary):
        shape = (*batch, *space.shape)
        return Binary(shape[-1], shape=shape, device=device, dtype=torch_dtype_of(space.dtype))
    if isinstance(space, spaces.Dict):
        return Composite(
            {
                key: gym_to_torchrl_spec_transform(sub, device, categorical_action_encoding, batch)
                for key, sub in space.spaces.items()
            },
            shape=batch,
            device=device,
        )
    if isinstance(space, spaces.Tuple):
        return Composite(
            {
                str(i): gym_to_torchrl_spec_transform(
                    sub, device, categorical_action_encoding, batch
                )
                for i, sub in enumerate(space.spaces)
            },
            shape=batch,
            device=device,
        )
    raise NotImplementedError(
        f"gymnasium space {space!r} ({type(space).__name__}) has no torchrl spec: supported are "
        "Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple"
    )


# ------------------------------------------------------------- gymnasium values -> tensors


def make_reader(space: Any, categorical: bool) -> ToTensor:
    """A function turning a value of ``space`` (batched or not) into a tensor or nested dict.

    Args:
        space: a gymnasium space (the ``single_*_space`` of a vector env).
        categorical: ``Discrete``/``MultiDiscrete`` values become indices, not one-hot rows.

    Returns:
        The reader: a value of the space in, a tensor (a dict for ``Dict``/``Tuple``) out.
    """
    spaces = import_gymnasium().spaces
    if isinstance(space, spaces.Box):
        np_dtype = space.dtype

        def read_box(value: npt.ArrayLike) -> torch.Tensor:
            return tensor_from_array(np.asarray(value, dtype=np_dtype))

        return read_box
    if isinstance(space, spaces.MultiBinary):
        np_dtype = space.dtype

        def read_binary(value: npt.ArrayLike) -> torch.Tensor:
            return torch.from_numpy(np.asarray(value, dtype=np_dtype))

        return read_binary
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        start = np.asarray(space.start, dtype=np.int64)
        has_start = bool(np.any(start != 0))
        if isinstance(space, spaces.Discrete):
            sizes = [int(space.n)]
        else:
            sizes = [int(v) for v in np.asarray(space.nvec).reshape(-1)]

        def read_index(value: npt.ArrayLike) -> torch.Tensor:
            index = np.asarray(value, dtype=np.int64)
            if has_start:
                # 0-d arithmetic yields a numpy scalar, which from_numpy refuses
                index = np.asarray(index - start)
            return torch.from_numpy(index)

        if categorical:
            return read_index
        if isinstance(space, spaces.Discrete):
            n = sizes[0]

            def read_one_hot(value: npt.ArrayLike) -> torch.Tensor:
                return torch.nn.functional.one_hot(read_index(value), n).bool()

            return read_one_hot

        def read_multi_one_hot(value: npt.ArrayLike) -> torch.Tensor:
            index = read_index(value)
            return torch.cat(
                [torch.nn.functional.one_hot(index[..., i], n) for i, n in enumerate(sizes)],
                dim=-1,
            ).bool()

        return read_multi_one_hot
    if isinstance(space, spaces.Dict):
        items = [(key, make_reader(sub, categorical)) for key, sub in space.spaces.items()]

        def read_dict(value: Mapping[str, Any]) -> dict[str, Any]:
            return {key: read(value[key]) for key, read in items}

        return read_dict
    if isinstance(space, spaces.Tuple):
        members = [(str(i), i, make_reader(sub, categorical)) for i, sub in enumerate(space.spaces)]

        def read_tuple(value: Sequence[Any]) -> dict[str, Any]:
            return {key: read(value[i]) for key, i, read in members}

        return read_tuple
    raise NotImplementedError(f"cannot read values of gymnasium space {space!r}")


# ---------------------------------------------------------------- tensors -> gymnasium actions


def make_writer(space: Any, categorical: bool, batched: bool) -> ToGym:
    """A function turning an action tensor (or TensorDict for Dict/Tuple spaces) into a gym action.

    Args:
        space: the action space (the ``single_action_space`` of a vector env).
        categorical: actions are indices, not one-hot rows.
        batched: actions carry a leading env dim (vector envs).

    Returns:
        The writer, which does no check: see :func:`make_checked_writer`.
    """
    spaces = import_gymnasium().spaces
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        np_dtype = space.dtype

        def write_array(action: torch.Tensor) -> np.ndarray:
            # the cast is a no-op when the policy already emits the space's dtype
            return np.asarray(action.detach().cpu().numpy(), dtype=np_dtype)

        return write_array
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        if not batched:
            # a numpy scalar of the space's dtype, as space.sample() gives: gymnasium checks it
            # faster than a Python int
            scalar = np.dtype(space.dtype).type
            if categorical:
                return lambda action: scalar(int(action) + start)

            def write_one_hot(action: torch.Tensor) -> np.generic:
                # a list search beats any tensor op on 2-20 entries (and takes bool tensors)
                values = action.tolist()
                return scalar(values.index(max(values)) + start)

            return write_one_hot
        # numpy's argmax takes bool one-hot tensors, which torch's does not
        if categorical:
            if start:
                return lambda action: action.detach().cpu().numpy().astype(np.int64) + start
            return lambda action: action.detach().cpu().numpy().astype(np.int64, copy=False)
        if start:
            return lambda action: action.detach().cpu().numpy().argmax(-1) + start
        return lambda action: action.detach().cpu().numpy().argmax(-1)
    if isinstance(space, spaces.MultiDiscrete):
        starts = np.asarray(space.start, dtype=np.int64)
        np_dtype = space.dtype
        splits = np.cumsum([int(v) for v in np.asarray(space.nvec).reshape(-1)])[:-1]
        if categorical:
            return lambda action: (action.detach().cpu().numpy() + starts).astype(np_dtype)

        def write_multi_one_hot(action: torch.Tensor) -> np.ndarray:
            parts = np.split(action.detach().cpu().numpy(), splits, axis=-1)
            index = np.stack([part.argmax(-1) for part in parts], axis=-1)
            return (index + starts).astype(np_dtype)

        return write_multi_one_hot
    if isinstance(space, spaces.Dict):
        items = [(key, make_writer(sub, categorical, batched)) for key, sub in space.spaces.items()]
        return lambda action: {key: write(action.get(key)) for key, write in items}
    if isinstance(space, spaces.Tuple):
        members = [(str(i), make_writer(sub, categorical, batched)) for i, sub in enumerate(space)]
        return lambda action: tuple(write(action.get(key)) for key, write in members)
    raise NotImplementedError(f"cannot write actions for gymnasium space {space!r}")


#: What a checked writer returns for an action it cannot vouch for (see make_checked_writer).
INVALID = object()

# Box actions with up to this many entries are checked and converted as a Python list.
_SMALL_BOX = 16


def make_checked_writer(space: Any, categorical: bool, spec: TensorSpec) -> ToGym | None:
    """A writer that checks the action against ``spec`` while converting it, for one env.

    The check and the conversion share one ``tolist()`` of the action (a few entries), which
    costs a fraction of the generic check of :mod:`torchrl.envs._action_checks`. The writer
    returns the gymnasium action, or :data:`INVALID` when the action may not fit (wrong type,
    shape or dtype kind, out of range, not one-hot, NaN, or a mask set on the spec): the caller
    then runs the generic check, which raises the detailed error (or accepts an action this
    shortcut does not handle, which is then converted by the plain writer).

    Args:
        space: the action space of an unbatched env (``Discrete`` or a 1-d float ``Box``).
        categorical: actions are indices (``Categorical``) rather than one-hot rows.
        spec: the action spec (read for its mask at each call).

    Returns:
        The writer, or ``None`` for other spaces (they get the generic check).
    """
    spaces = import_gymnasium().spaces
    if type(space) is spaces.Discrete:
        n, start = int(space.n), int(space.start)
        zeros = n - 1
        # a numpy scalar of the space's dtype, as the plain writer gives
        scalar = np.dtype(space.dtype).type
        if categorical:

            def write_index(action: object) -> object:
                if not isinstance(action, torch.Tensor) or spec.mask is not None:  # type: ignore[attr-defined]
                    return INVALID
                index = action.tolist()  # a Python int for a 0-d integer tensor
                if type(index) is not int or not 0 <= index < n:
                    return INVALID
                return scalar(index + start)

            return write_index

        def write_one_hot(action: object) -> object:
            if not isinstance(action, torch.Tensor) or spec.mask is not None:  # type: ignore[attr-defined]
                return INVALID
            row = action.tolist()
            # one 1 and n - 1 zeros in a flat list of n ints or bools (True == 1, False == 0)
            if type(row) is not list or len(row) != n or row.count(1) != 1 or row.count(0) != zeros:
                return INVALID
            kind = type(row[0])
            if kind is not bool and kind is not int:  # a float one-hot row: wrong dtype kind
                return INVALID
            return scalar(row.index(1) + start)

        return write_one_hot
    if (
        type(space) is spaces.Box
        and len(space.shape) == 1
        and 0 < space.shape[0] <= _SMALL_BOX
        and np.dtype(space.dtype).kind == "f"
        and isinstance(spec, Bounded)
    ):
        size = int(space.shape[0])
        np_dtype = space.dtype
        lows: list[float] = spec.low.reshape(-1).tolist()
        highs: list[float] = spec.high.reshape(-1).tolist()

        def write_box(action: object) -> object:
            if not isinstance(action, torch.Tensor):
                return INVALID
            values = action.tolist()
            if type(values) is not list or len(values) != size:
                return INVALID
            for value, low, high in zip(values, lows, highs):
                # floats only (the dtype kind); NaN fails both comparisons
                if type(value) is not float or not low <= value <= high:
                    return INVALID
            # the same float32 values as the plain writer's cast of the tensor
            return np.array(values, dtype=np_dtype)

        return write_box
    return None


def raise_if_bad_action(env: EnvBase, action: Any, batch: Sequence[int], err: Exception) -> None:
    """Turns an error of the action conversion into one naming the key, the spec and the action.

    Called when converting or stepping failed (with ``validate_actions=False``, or an action
    the spec accepts but gymnasium refuses): if the action does not have the shape of the
    action spec (an index given to a one-hot env, a missing trailing dim...) or a value out of
    it (gymnasium's bare ``AssertionError`` on an out-of-range index), that is the cause.

    Args:
        env: the wrapper whose ``"action"`` spec the action was meant for.
        action: the action that failed.
        batch: the batch dims the action should have in front.
        err: the error of the conversion or of gymnasium's ``step``, chained to the new one.

    Raises:
        ValueError: when the action does not fit the spec; otherwise nothing (the caller
            re-raises ``err``).
    """
    spec = env.full_action_spec[ACTION]
    expected = (*batch, *spec.shape[len(env.batch_size) :])
    got = tuple(action.shape) if isinstance(action, torch.Tensor) else None
    if got != expected:
        described = f"shape {got}, dtype {action.dtype}" if got is not None else type(action)
        hint = (
            " A one-hot spec takes one-hot actions; build the env with "
            "categorical_action_encoding=True for integer indices."
            if type(spec).__name__ == "OneHot"
            else ""
        )
        raise ValueError(
            f"{type(env).__name__}: the action under key {ACTION!r} does not fit the action spec "
            f"{type(spec).__name__} (expected shape {expected}, dtype {spec.dtype}); got "
            f"{described}.{hint}"
        ) from err
    if isinstance(action, torch.Tensor) and isinstance(spec, TensorSpec):
        try:
            spec.assert_is_in(action if action.dtype is spec.dtype else action.to(spec.dtype))
        except AssertionError as reason:
            raise ValueError(
                f"{type(env).__name__}: the action under key {ACTION!r} does not fit the action "
                f"spec {spec!r}: {reason}; got {action!r}"
            ) from err
