"""gymnasium spaces on the torchrl side: space -> spec, gymnasium value -> tensor, tensor -> action.

Each function here runs once per env construction and returns a spec or a small closure; the
closures are what ``GymWrapper`` calls at every step, so they do no dispatch on the space there.
The module is private to :mod:`torchrl.envs.libs`; its names are the ones the gymnasium-based
wrappers there (gym, envpool, pettingzoo, vmas) share.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from tensordict import NonTensorData, NonTensorStack

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
    NonTensor,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.envs.common import EnvBase

__all__ = [
    "INVALID",
    "ToGym",
    "ToTensor",
    "backend_of",
    "gym_backend",
    "gym_to_torchrl_spec_transform",
    "has_spec_conversion",
    "import_gymnasium",
    "is_text_space",
    "make_checked_writer",
    "make_reader",
    "make_writer",
    "raise_if_bad_action",
    "register_gym_spec_conversion",
    "set_gym_backend",
    "spaces_of",
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


# ---------------------------------------------------------------------------- the gym backend

#: The package names a backend may have: gymnasium, or the legacy gym (0.26 API).
_BACKEND_NAMES = ("gymnasium", "gym")
# The stack of backends chosen with set_gym_backend (the last one is current); a backend is
# stored as a module, a name or a callable, resolved when gym_backend() is called.
_backend_stack: list[ModuleType | str | Callable[[], ModuleType]] = []


def _resolve_backend(backend: ModuleType | str | Callable[[], ModuleType]) -> ModuleType:
    if isinstance(backend, ModuleType):
        module = backend
    elif isinstance(backend, str):
        if backend not in _BACKEND_NAMES:
            raise ValueError(
                f"set_gym_backend: unknown backend {backend!r}; expected one of {_BACKEND_NAMES} "
                "(or the module itself, or a callable returning it)"
            )
        module = import_optional(backend, extra="gym")
    elif callable(backend):
        module = backend()
        if not isinstance(module, ModuleType):
            raise TypeError(
                f"set_gym_backend: the callable {backend!r} returned {type(module).__name__}, "
                "expected the gymnasium or gym module"
            )
    else:
        raise TypeError(
            f"set_gym_backend: expected a module, a name or a callable returning a module, got "
            f"{type(backend).__name__}: {backend!r}"
        )
    if module.__name__ not in _BACKEND_NAMES:
        raise ValueError(
            f"set_gym_backend: {module.__name__!r} is not a gym backend; expected one of "
            f"{_BACKEND_NAMES}"
        )
    return module


def gym_backend(submodule: str | None = None) -> ModuleType:
    """The gym backend in use (``gymnasium`` unless :class:`set_gym_backend` chose another).

    Args:
        submodule: a submodule of the backend to return instead, e.g. ``"spaces"`` or
            ``"wrappers"``.

    Returns:
        The backend module (or its submodule).

    Examples:
        >>> from torchrl.envs.libs.gym import gym_backend, set_gym_backend
        >>> gym_backend().__name__
        'gymnasium'
        >>> with set_gym_backend("gym"):
        ...     gym_backend("spaces").__name__
        'gym.spaces'
    """
    module = _resolve_backend(_backend_stack[-1]) if _backend_stack else import_gymnasium()
    if submodule is None:
        return module
    return importlib.import_module(f"{module.__name__}.{submodule}")


_F = TypeVar("_F", bound=Callable[..., Any])


class set_gym_backend:  # noqa: N801 (TorchRL's public name)
    """Chooses the gym backend (``gymnasium`` or the legacy ``gym``) within a block or a function.

    Used as a context manager or as a decorator; the backend is read by :func:`gym_backend`,
    which :class:`~torchrl.envs.GymEnv` calls to build its env (``make``) and to list the
    registered ids. Wrapped envs need no backend: :class:`~torchrl.envs.GymWrapper` reads the
    package of the env it is given. Nested uses stack; leaving a block restores the backend
    that was current before it.

    Args:
        backend: ``"gymnasium"``, ``"gym"``, the module itself, or a callable returning it (a
            name or a callable imports the package only when the backend is used).

    Examples:
        >>> import gymnasium
        >>> from torchrl.envs.libs.gym import gym_backend, set_gym_backend
        >>> with set_gym_backend("gym"):
        ...     gym_backend().__version__ >= "0.26"
        True
        >>> @set_gym_backend(gymnasium)
        ... def backend_name():
        ...     return gym_backend().__name__
        >>> backend_name()
        'gymnasium'
    """

    def __init__(self, backend: ModuleType | str | Callable[[], ModuleType]) -> None:
        # names and callables are resolved (imported) when used; check what can be checked now
        if isinstance(backend, ModuleType) or (
            isinstance(backend, str) and backend not in _BACKEND_NAMES
        ):
            _resolve_backend(backend)  # raises the error naming the accepted backends
        elif not isinstance(backend, str) and not callable(backend):
            _resolve_backend(backend)  # raises a TypeError
        self.backend = backend

    def __enter__(self) -> set_gym_backend:
        _backend_stack.append(self.backend)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _backend_stack.pop()

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def with_backend(*args: Any, **kwargs: Any) -> Any:
            with set_gym_backend(self.backend):
                return func(*args, **kwargs)

        return with_backend  # type: ignore[return-value]


def backend_of(obj: Any) -> ModuleType:
    """The gym package (``gymnasium`` or ``gym``) that defines the class of ``obj``.

    An env or space built by the legacy ``gym`` reports ``gym``; one whose classes come from
    neither package (a hand-written env) reports the current :func:`gym_backend`.
    """
    for cls in type(obj).__mro__:
        root = cls.__module__.split(".")[0]
        if root in _BACKEND_NAMES:
            return importlib.import_module(root)
    return gym_backend()


def spaces_of(space: Any) -> ModuleType:
    """The ``spaces`` module of the package that defines ``space`` (gymnasium's or gym's)."""
    return importlib.import_module(f"{backend_of(space).__name__}.spaces")


# ------------------------------------------------------------------ user-registered conversions

#: Conversions registered with register_gym_spec_conversion: space type (or the dotted name of
#: a class of the backend's ``spaces`` module) -> function returning the spec.
_SPEC_CONVERSIONS: dict[type | str, Callable[..., TensorSpec]] = {}


def register_gym_spec_conversion(spec_type: type | str) -> Callable[[_F], _F]:
    """Registers a function that converts a (custom) gym space type to a torchrl spec.

    The decorated function is called with the space and the keywords ``dtype`` (``None``),
    ``device``, ``categorical_action_encoding``, ``remap_state_to_observation`` (``False``) and
    ``batch_size``, for every space that is an instance of ``spec_type`` (before the built-in
    conversions, so a subclass of ``Box`` may be given its own), wherever a space is converted,
    nested ``Dict``/``Tuple`` members included.
    It must return a spec whose shape starts with ``batch_size``; unused keywords can be
    gathered in ``**kwargs``. Values of such a space are read with ``numpy.asarray`` and cast to
    the spec's dtype; actions are passed to the env as numpy arrays.

    Args:
        spec_type: the space class, or its name in the backend's ``spaces`` module (e.g.
            ``"Text"``, or a dotted path below it), looked up in gymnasium and gym.

    Returns:
        A decorator that registers the function and returns it unchanged.

    Examples:
        >>> import gymnasium as gym
        >>> import torch
        >>> from torchrl.data import Bounded
        >>> from torchrl.envs.libs.gym import (
        ...     gym_to_torchrl_spec_transform,
        ...     register_gym_spec_conversion,
        ... )
        >>> class Angle(gym.spaces.Box):
        ...     def __init__(self):
        ...         super().__init__(-3.15, 3.15, shape=(1,))
        >>> @register_gym_spec_conversion(Angle)
        ... def angle_to_spec(space, device=None, batch_size=(), **kwargs):
        ...     return Bounded(-torch.pi, torch.pi, shape=(*batch_size, 1), device=device)
        >>> gym_to_torchrl_spec_transform(Angle()).high
        tensor([3.1416])
    """
    if not isinstance(spec_type, (type, str)):
        raise TypeError(
            "register_gym_spec_conversion: spec_type must be a space class or its name in the "
            f"backend's spaces module, got {type(spec_type).__name__}: {spec_type!r}"
        )

    def register(fn: _F) -> _F:
        if not callable(fn):
            raise TypeError(f"register_gym_spec_conversion: {fn!r} is not callable")
        _SPEC_CONVERSIONS[spec_type] = fn
        return fn

    return register


def has_spec_conversion(space: Any) -> bool:
    """Whether a conversion registered with :func:`register_gym_spec_conversion` handles ``space``.

    The fast paths that assume a built-in space (checked writers, batched steppers) stand
    aside for such spaces.
    """
    return _registered_conversion(space) is not None


def _named_space_type(name: str, spaces: ModuleType) -> type | None:
    target: Any = spaces
    for part in name.removeprefix("spaces.").split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target if isinstance(target, type) else None


def _registered_conversion(space: Any) -> Callable[..., TensorSpec] | None:
    """The registered conversion for ``space``; the last registered match wins."""
    if not _SPEC_CONVERSIONS:
        return None
    spaces = spaces_of(space)
    for spec_type, fn in reversed(list(_SPEC_CONVERSIONS.items())):
        cls = _named_space_type(spec_type, spaces) if isinstance(spec_type, str) else spec_type
        if cls is not None and isinstance(space, cls):
            return fn
    return None


def torch_dtype_of(np_dtype: npt.DTypeLike) -> torch.dtype:
    """The torch dtype of a numpy dtype (``np.float64`` -> ``torch.float64``).

    Examples:
        >>> import numpy as np
        >>> from torchrl.envs.libs._gym_spaces import torch_dtype_of
        >>> torch_dtype_of(np.uint8)
        torch.uint8
    """
    return torch.from_numpy(np.zeros((), dtype=np_dtype)).dtype


def _numpy_dtype(dtype: torch.dtype | None) -> np.dtype:
    return torch.empty((), dtype=dtype or torch.float32).numpy().dtype


def tensor_from_array(value: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy(value)`` (a view), or a copy when ``value`` has negative strides."""
    try:
        return torch.from_numpy(value)
    except ValueError:
        # negative strides (e.g. an image flipped with [::-1]) cannot be viewed by torch
        return torch.from_numpy(np.ascontiguousarray(value))


# --------------------------------------------------------------------------- spaces -> specs


def is_text_space(space: Any) -> bool:
    """Whether ``space`` holds strings: gymnasium's ``Text``, or a space with a string dtype.

    Minigrid's ``MissionSpace`` is no ``Text`` subclass but declares ``dtype=str``, as ``Text``
    does; both map to a :class:`~torchrl.data.NonTensor` spec and their values pass through as
    Python strings.

    Examples:
        >>> import gymnasium as gym
        >>> from torchrl.envs.libs._gym_spaces import is_text_space
        >>> is_text_space(gym.spaces.Text(8)), is_text_space(gym.spaces.Discrete(3))
        (True, False)
    """
    text = getattr(spaces_of(space), "Text", None)
    if text is not None and isinstance(space, text):
        return True
    # gymnasium stores dtype=str as numpy's unicode dtype ("<U0")
    dtype = getattr(space, "dtype", None)
    return isinstance(dtype, np.dtype) and dtype.kind in ("U", "S")


def _text_example(space: Any) -> str:
    """A string that every text space accepts: its first character ``min_length`` times."""
    min_length = int(getattr(space, "min_length", 0) or 0)
    charset = getattr(space, "character_list", None) or getattr(space, "characters", "")
    if not min_length or not charset:
        return ""
    return str(sorted(charset)[0]) * min_length


def gym_to_torchrl_spec_transform(
    space: Any,
    device: DeviceLike = "cpu",
    categorical_action_encoding: bool = False,
    batch_size: Sequence[int] = (),
) -> TensorSpec:
    """Maps a gymnasium space to the torchrl spec that describes its values.

    Args:
        space: a ``gymnasium.spaces.Space`` (``Box``, ``Discrete``, ``MultiDiscrete``,
            ``MultiBinary``, ``Text``, ``Dict`` or ``Tuple``, nested freely). ``Text`` (and any
            space with ``dtype=str``, such as Minigrid's ``MissionSpace``) becomes a
            :class:`~torchrl.data.NonTensor` spec of shape ``batch_size`` whose example is a
            string the space accepts (``""`` unless ``min_length`` is set).
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
        >>> gym_to_torchrl_spec_transform(gym.spaces.Text(8), batch_size=[2])
        NonTensor(shape=torch.Size([2]), dtype=None, device=cpu)
    """
    batch = tuple(batch_size)
    registered = _registered_conversion(space)
    if registered is not None:
        spec = registered(
            space,
            dtype=None,
            device=device,
            categorical_action_encoding=categorical_action_encoding,
            remap_state_to_observation=False,
            batch_size=torch.Size(batch),
        )
        if not isinstance(spec, TensorSpec):
            raise TypeError(
                f"the conversion registered for {type(space).__name__} returned "
                f"{type(spec).__name__}, expected a torchrl TensorSpec"
            )
        if tuple(spec.shape[: len(batch)]) != batch:
            raise ValueError(
                f"the conversion registered for {type(space).__name__} returned a spec of shape "
                f"{tuple(spec.shape)}, which does not start with batch_size={list(batch)}"
            )
        return spec
    spaces = spaces_of(space)
    if is_text_space(space):
        return NonTensor(shape=batch, device=device, example_data=_text_example(space))
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
        "Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict and Tuple; register a conversion for "
        "other space types with register_gym_spec_conversion(space_type)"
    )


# ------------------------------------------------------------- gymnasium values -> tensors


def _read_text(value: Any) -> NonTensorData | NonTensorStack:
    """A string as ``NonTensorData``; a vector env's strings (tuple or array) as a stack."""
    if isinstance(value, str):
        return NonTensorData(data=value, batch_size=())
    # a vector env gives a tuple (or an object array) of strings, one per sub-env
    return NonTensorStack(*(NonTensorData(data=str(v), batch_size=()) for v in value))


def make_reader(space: Any, categorical: bool) -> ToTensor:
    """A function turning a value of ``space`` (batched or not) into a tensor or nested dict.

    Args:
        space: a gymnasium space (the ``single_*_space`` of a vector env).
        categorical: ``Discrete``/``MultiDiscrete`` values become indices, not one-hot rows.

    Returns:
        The reader: a value of the space in, a tensor (a dict for ``Dict``/``Tuple``) out.
    """
    if _registered_conversion(space) is not None:
        np_dtype = _numpy_dtype(gym_to_torchrl_spec_transform(space, "cpu", categorical).dtype)

        def read_registered(value: Any) -> torch.Tensor:
            return tensor_from_array(np.asarray(value, dtype=np_dtype))

        return read_registered
    spaces = spaces_of(space)
    if is_text_space(space):
        return _read_text
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
        # the legacy gym's MultiDiscrete has no start (always 0)
        start = np.asarray(getattr(space, "start", 0), dtype=np.int64)
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
    if _registered_conversion(space) is not None:
        return lambda action: action.detach().cpu().numpy()
    spaces = spaces_of(space)
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
        starts = np.asarray(getattr(space, "start", 0), dtype=np.int64)
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
    if is_text_space(space):
        return _write_text
    raise NotImplementedError(f"cannot write actions for gymnasium space {space!r}")


def _write_text(action: Any) -> Any:
    """Unwraps string actions (``NonTensorData``: its string; a stack: a tuple of them)."""
    if isinstance(action, NonTensorStack):
        return tuple(action.tolist())
    if isinstance(action, NonTensorData):
        return action.data
    return action


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
    if has_spec_conversion(space):
        return None
    spaces = spaces_of(space)
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
