"""``Transform`` and ``Compose``: rewriting what goes in and out of an env.

A transform rewrites the entries an env returns (``_call`` on step outputs, ``_reset`` on reset
outputs), the actions that go in (``_inv_call``), and the specs it changes
(``transform_observation_spec``, ...). The same object works as a module on any TensorDict
(``forward``) and inside a replay buffer (``forward`` on samples, ``inv`` on writes).

``TransformedEnv`` (in :mod:`torchrl.envs.transforms.env`) runs them around an env.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._types import NestedKey
from torchrl.data.specs import Composite
from torchrl.envs.transforms._utils import (
    get,
    key_list,
    missing_key_error,
    set_,
    shallow_copy,
)

if TYPE_CHECKING:
    from torchrl.envs.transforms.env import TransformedEnv

__all__ = ["Compose", "ObservationTransform", "Transform"]


@runtime_checkable
class _TransformHost(Protocol):
    """What the env running a chain of transforms (``TransformedEnv``) offers to them.

    A Protocol rather than an import: ``TransformedEnv`` is built on this module, which
    therefore cannot import it back.
    """

    def _refresh_specs(self) -> None: ...

    def _view_through(self, transforms: Sequence[Transform]) -> TransformedEnv: ...


class Transform(nn.Module):
    """Base class of env transforms: rewrites outputs, inverts inputs, and rewrites the specs.

    A subclass usually writes ``_apply_transform(tensor)`` (applied to each ``in_keys`` entry,
    written to the matching ``out_keys`` entry) and the spec methods it needs. Transforms with
    state or with several inputs override ``_call(next_tensordict)`` (step outputs),
    ``_reset(tensordict, tensordict_reset)`` (reset outputs; ``tensordict`` holds the
    ``"_reset"`` masks and the previous entries) or ``_step(tensordict, next_tensordict)``.
    Inverse keys go the other way: ``_inv_call`` reads ``out_keys_inv`` (what the policy
    writes) and writes ``in_keys_inv`` (what the base env reads), through
    ``_inv_apply_transform``. A missing input key raises a ``KeyError`` naming the key and the
    transform.

    Args:
        in_keys: the keys read on the way out (a key or a list; a tuple is one nested key).
        out_keys: where results are written (default: ``in_keys``).
        in_keys_inv: the keys of the base env's inputs written by the inverse pass.
        out_keys_inv: the keys read by the inverse pass (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import Transform
        >>> class Double(Transform):
        ...     def _apply_transform(self, obs):
        ...         return obs * 2
        >>> t = Double(in_keys=["observation"], out_keys=["doubled"])
        >>> t(TensorDict(observation=torch.ones(2))).get("doubled")
        tensor([2., 2.])
        >>> t(TensorDict(other=torch.ones(2)))
        Traceback (most recent call last):
        ...
        KeyError: "Double: the input key 'observation' is missing from the TensorDict (its keys: ['other'])"
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self._container_ref: weakref.ReferenceType | None = None
        # In a list: a Module attribute would register the parent env as a child module.
        self._parent_box: list[TransformedEnv] = []
        #: When ``True``, a missing input key is skipped instead of raising (used on resets).
        self.missing_tolerance = False
        self._in_keys = key_list(in_keys, "in_keys")
        self._out_keys = None if out_keys is None else key_list(out_keys, "out_keys")
        self._in_keys_inv = key_list(in_keys_inv, "in_keys_inv")
        self._out_keys_inv = (
            None if out_keys_inv is None else key_list(out_keys_inv, "out_keys_inv")
        )
        self._update_pairs()

    # ------------------------------------------------------------------------------- keys
    def _update_pairs(self) -> None:
        out_keys = self.out_keys
        if len(out_keys) != len(self._in_keys):
            raise ValueError(
                f"{type(self).__name__}: in_keys {self._in_keys} and out_keys {out_keys} must "
                "have the same length"
            )
        out_inv = self.out_keys_inv
        if len(out_inv) != len(self._in_keys_inv):
            raise ValueError(
                f"{type(self).__name__}: in_keys_inv {self._in_keys_inv} and out_keys_inv "
                f"{out_inv} must have the same length"
            )
        self._pairs = list(zip(self._in_keys, out_keys))
        self._inv_pairs = list(zip(self._in_keys_inv, out_inv))

    @property
    def in_keys(self) -> list[NestedKey]:
        """The keys read on the way out of the env."""
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        self._in_keys = key_list(value, "in_keys")
        self._update_pairs()

    @property
    def out_keys(self) -> list[NestedKey]:
        """The keys written on the way out (``in_keys`` unless set)."""
        return list(self._in_keys) if self._out_keys is None else self._out_keys

    @out_keys.setter
    def out_keys(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        self._out_keys = None if value is None else key_list(value, "out_keys")
        self._update_pairs()

    @property
    def in_keys_inv(self) -> list[NestedKey]:
        """The base env's input keys written by the inverse pass."""
        return self._in_keys_inv

    @in_keys_inv.setter
    def in_keys_inv(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        self._in_keys_inv = key_list(value, "in_keys_inv")
        self._update_pairs()

    @property
    def out_keys_inv(self) -> list[NestedKey]:
        """The keys the inverse pass reads (``in_keys_inv`` unless set)."""
        return list(self._in_keys_inv) if self._out_keys_inv is None else self._out_keys_inv

    @out_keys_inv.setter
    def out_keys_inv(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        self._out_keys_inv = None if value is None else key_list(value, "out_keys_inv")
        self._update_pairs()

    # ----------------------------------------------------------------------- data path
    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} must implement _apply_transform(tensor) or override _call"
        )

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Rewrites the outputs of a step (``in_keys`` -> ``out_keys``) in place."""
        for in_key, out_key in self._pairs:
            value = get(next_tensordict, in_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, in_key, next_tensordict)
            set_(next_tensordict, out_key, self._apply_transform(value))
        return next_tensordict

    def _call_tolerant(self, tensordict: TensorDictBase) -> TensorDictBase:
        previous = self.missing_tolerance
        self.missing_tolerance = True
        try:
            return self._call(tensordict)
        finally:
            self.missing_tolerance = previous

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the transform to ``tensordict`` itself (module and replay-buffer use).

        Args:
            tensordict: any TensorDict holding the ``in_keys``.

        Returns:
            ``tensordict``, with the ``out_keys`` written.
        """
        return self._call(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Rewrites a step's outputs; ``tensordict`` is the step's input (read-only here)."""
        return self._call(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        """Rewrites a reset's outputs; ``tensordict`` holds the ``"_reset"`` masks, if any."""
        return tensordict_reset

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sees (and may rewrite) a reset's input before the base env resets.

        Called only for transforms that override it, so it costs nothing to the others.
        """
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rewrites the inputs of a step in place (``out_keys_inv`` -> ``in_keys_inv``)."""
        for in_key, out_key in self._inv_pairs:
            value = get(tensordict, out_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, out_key, tensordict)
            set_(tensordict, in_key, self._inv_apply_transform(value))
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the inverse transform to a shallow copy of ``tensordict``.

        Args:
            tensordict: the inputs of a step (or data written to a replay buffer).

        Returns:
            A new TensorDict sharing the tensors of ``tensordict``, with ``in_keys_inv`` written
            (``tensordict`` itself when the transform has no inverse).
        """
        if not self._uses_inv():
            return tensordict
        return self._inv_call(shallow_copy(tensordict))

    # ---------------------------------------------------- which hooks a transform uses
    def _uses_inv(self) -> bool:
        return bool(self._inv_pairs) or type(self)._inv_call is not Transform._inv_call

    def _uses_reset(self) -> bool:
        return type(self)._reset is not Transform._reset

    def _uses_pre_reset(self) -> bool:
        return type(self)._reset_env_preprocess is not Transform._reset_env_preprocess

    def _uses_step(self) -> bool:
        cls = type(self)
        return (
            bool(self._pairs)
            or cls._step is not Transform._step
            or cls._call is not Transform._call
        )

    # ------------------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Composite) -> Composite:
        """Rewrites an env's ``output_spec`` (calls the observation, reward and done methods).

        Args:
            output_spec: a Composite with ``full_observation_spec``, ``full_reward_spec`` and
                ``full_done_spec``; it may be edited in place.

        Returns:
            The transformed ``output_spec``.
        """
        for name, method in (
            ("full_observation_spec", self.transform_observation_spec),
            ("full_reward_spec", self.transform_reward_spec),
            ("full_done_spec", self.transform_done_spec),
        ):
            sub = output_spec.get(name, None)
            if sub is not None:
                new = method(sub)
                if new is not sub:
                    output_spec[name] = new
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        """Rewrites an env's ``input_spec`` (calls the state and action methods).

        Args:
            input_spec: a Composite with ``full_state_spec`` and ``full_action_spec``; it may be
                edited in place.

        Returns:
            The transformed ``input_spec``.
        """
        for name, method in (
            ("full_state_spec", self.transform_state_spec),
            ("full_action_spec", self.transform_action_spec),
        ):
            sub = input_spec.get(name, None)
            if sub is not None:
                new = method(sub)
                if new is not sub:
                    input_spec[name] = new
        return input_spec

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        """The device of the env seen through this transform (default: unchanged)."""
        return device

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """The batch size of the env seen through this transform (default: unchanged)."""
        return batch_size

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Rewrites the full observation spec (a Composite; may be edited in place)."""
        return observation_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        """Rewrites the full reward spec (a Composite; may be edited in place)."""
        return reward_spec

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        """Rewrites the full done spec (a Composite; may be edited in place)."""
        return done_spec

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        """Rewrites the full action spec (a Composite; may be edited in place)."""
        return action_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        """Rewrites the full state spec (a Composite; may be edited in place)."""
        return state_spec

    # ------------------------------------------------------------------ container, parent
    def _container(self) -> Any:
        ref = self._container_ref
        return ref() if ref is not None else None

    def set_container(self, container: object) -> None:
        """Declares the ``Compose``, env or replay buffer that holds this transform.

        Raises:
            AttributeError: when the transform already belongs to another container (use
                :meth:`clone` to put a copy elsewhere).
        """
        current = self._container()
        if current is not None and current is not container:
            raise AttributeError(
                f"{type(self).__name__} already belongs to a {type(current).__name__}; "
                "use transform.clone() to use a copy in another env or Compose"
            )
        self._container_ref = weakref.ref(container)
        self._parent_box = []

    def reset_parent(self) -> None:
        """Detaches the transform from its container."""
        self._container_ref = None
        self._parent_box = []

    @property
    def container(self) -> Any:
        """The env (or replay buffer) holding this transform, through any ``Compose``."""
        container = self._container()
        while isinstance(container, Compose):
            container = container._container()
        return container

    def _chain(self) -> tuple[Any, list[Transform]]:
        """The outermost container and the transforms that run before this one."""
        preceding: list[Transform] = []
        node: Transform = self
        container = node._container()
        while isinstance(container, Compose):
            index = next(i for i, t in enumerate(container._ts) if t is node)
            preceding = list(container._ts[:index]) + preceding
            node = container
            container = node._container()
        return container, preceding

    def _following(self) -> list[Transform]:
        """The transforms that run after this one, in order."""
        following: list[Transform] = []
        node: Transform = self
        container = node._container()
        while isinstance(container, Compose):
            index = next(i for i, t in enumerate(container._ts) if t is node)
            following += list(container._ts[index + 1 :])
            node = container
            container = node._container()
        return following

    @property
    def parent(self) -> TransformedEnv | None:
        """The env as this transform sees it: the base env and the transforms before this one.

        It is a read-only view sharing the base env and the transforms; ``None`` when the
        transform is not in an env.
        """
        if self._parent_box:
            return self._parent_box[0]
        container, preceding = self._chain()
        if not isinstance(container, _TransformHost):
            return None
        parent = container._view_through(preceding)
        self._parent_box = [parent]
        return parent

    def _clear_parent_cache(self) -> None:
        self._parent_box = []

    def clone(self) -> Transform:
        """A deep copy with no container (to use the same transform in another env)."""
        import copy

        return copy.deepcopy(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Weak references do not pickle; the container re-attaches its children on load.
        state["_container_ref"] = None
        state["_parent_box"] = []
        return state

    def extra_repr(self) -> str:
        parts = []
        if self._in_keys:
            parts.append(f"in_keys={self._in_keys}")
            if self._out_keys is not None and self._out_keys != self._in_keys:
                parts.append(f"out_keys={self._out_keys}")
        if self._in_keys_inv:
            parts.append(f"in_keys_inv={self._in_keys_inv}")
            if self._out_keys_inv is not None and self._out_keys_inv != self._in_keys_inv:
                parts.append(f"out_keys_inv={self._out_keys_inv}")
        return ", ".join(parts)


class ObservationTransform(Transform):
    """A transform of observations: it also rewrites the entries that come out of a reset.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import ObservationTransform, TransformedEnv
        >>> class Negate(ObservationTransform):
        ...     def _apply_transform(self, obs):
        ...         return -obs
        >>> base = PendulumEnv(seed=0)
        >>> env = TransformedEnv(PendulumEnv(seed=0), Negate(in_keys=["observation"]))
        >>> bool((env.reset()["observation"] == -base.reset()["observation"]).all())
        True
    """

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        # Keys such as rewards are not in reset outputs: skip what is missing.
        return self._call_tolerant(tensordict_reset)


class Compose(Transform):
    """A chain of transforms, applied in order (inverses in reverse order).

    Supports ``len``, iteration, indexing (an int gives a transform; a slice gives a ``Compose``
    view sharing the transforms), :meth:`append` and :meth:`insert`.

    Args:
        *transforms: the transforms, first applied first (a single list is accepted too).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import Compose, RewardSum, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(10), RewardSum()))
        >>> len(env.transform), type(env.transform[0]).__name__
        (2, 'StepCounter')
        >>> env.rollout(20)["next", "step_count"][-1]
        tensor([10])
    """

    def __init__(self, *transforms: Transform | Sequence[Transform]) -> None:
        super().__init__()
        items: Sequence[Any] = transforms
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            items = tuple(transforms[0])
        for t in items:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose takes Transform objects, got {type(t).__name__}")
        for t in items:
            t.set_container(self)
        self.transforms = nn.ModuleList(items)
        self._prepare()

    @classmethod
    def _view(cls, transforms: Sequence[Transform]) -> Compose:
        """A Compose running ``transforms`` without becoming their container."""
        view = cls.__new__(cls)
        Transform.__init__(view)
        view.transforms = nn.ModuleList(transforms)
        view._prepare()
        return view

    def _prepare(self) -> None:
        """Lists the children each hook runs through (after their keys are known)."""
        # A typed mirror of the ModuleList (which registers the children).
        self._ts: tuple[Transform, ...] = tuple(cast(Transform, t) for t in self.transforms)
        for t in self._ts:
            if isinstance(t, Compose):
                t._prepare()
        self._step_list = [t for t in self._ts if t._uses_step()]
        self._reset_list = [t for t in self._ts if t._uses_reset()]
        self._pre_reset_list = [t for t in self._ts if t._uses_pre_reset()]
        self._inv_list = [t for t in reversed(self._ts) if t._uses_inv()]

    def _uses_inv(self) -> bool:
        return bool(self._inv_list)

    def _uses_reset(self) -> bool:
        return bool(self._reset_list)

    def _uses_pre_reset(self) -> bool:
        return bool(self._pre_reset_list)

    def _uses_step(self) -> bool:
        return bool(self._step_list)

    # ----------------------------------------------------------------------- data path
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._ts:
            next_tensordict = t._call(next_tensordict)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._ts:
            tensordict = t(tensordict)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._step_list:
            next_tensordict = t._step(tensordict, next_tensordict)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for t in self._reset_list:
            tensordict_reset = t._reset(tensordict, tensordict_reset)
        return tensordict_reset

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._pre_reset_list:
            tensordict = t._reset_env_preprocess(tensordict)
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._inv_list:
            tensordict = t._inv_call(tensordict)
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._inv_list:
            return tensordict
        return self._inv_call(shallow_copy(tensordict))

    # ------------------------------------------------------------------------------ specs
    def transform_output_spec(self, output_spec: Composite) -> Composite:
        for t in self._ts:
            output_spec = t.transform_output_spec(output_spec)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        for t in self._ts:
            input_spec = t.transform_input_spec(input_spec)
        return input_spec

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        for t in self._ts:
            device = t.transform_env_device(device)
        return device

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        for t in self._ts:
            batch_size = t.transform_env_batch_size(batch_size)
        return batch_size

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for t in self._ts:
            observation_spec = t.transform_observation_spec(observation_spec)
        return observation_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        for t in self._ts:
            reward_spec = t.transform_reward_spec(reward_spec)
        return reward_spec

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        for t in self._ts:
            done_spec = t.transform_done_spec(done_spec)
        return done_spec

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        for t in self._ts:
            action_spec = t.transform_action_spec(action_spec)
        return action_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        for t in self._ts:
            state_spec = t.transform_state_spec(state_spec)
        return state_spec

    # ---------------------------------------------------------------------- list access
    def __len__(self) -> int:
        return len(self._ts)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self._ts)

    def __getitem__(self, index: int | slice) -> Transform:
        if isinstance(index, slice):
            return Compose._view(list(self._ts[index]))
        return self._ts[index]

    def append(self, transform: Transform) -> None:
        """Adds a transform at the end (the env's specs are recomputed).

        Args:
            transform: the transform; it must not belong to another container.
        """
        if not isinstance(transform, Transform):
            raise TypeError(f"Compose.append takes a Transform, got {type(transform).__name__}")
        transform.set_container(self)
        self.transforms.append(transform)
        self._changed()

    def insert(self, index: int, transform: Transform) -> None:
        """Inserts a transform before position ``index`` (the env's specs are recomputed).

        Args:
            index: the position, as for ``list.insert``.
            transform: the transform; it must not belong to another container.
        """
        if not isinstance(transform, Transform):
            raise TypeError(f"Compose.insert takes a Transform, got {type(transform).__name__}")
        transform.set_container(self)
        self.transforms.insert(index, transform)
        self._changed()

    def _changed(self) -> None:
        self._prepare()
        self._clear_parent_cache()
        container = self._container()
        if isinstance(container, Compose):
            container._changed()
        elif isinstance(container, _TransformHost):
            container._refresh_specs()

    def _clear_parent_cache(self) -> None:
        self._parent_box = []
        for t in self._ts:
            t._clear_parent_cache()

    def set_container(self, container: object) -> None:
        super().set_container(container)
        self._clear_parent_cache()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for t in self._ts:
            t._container_ref = weakref.ref(self)

    def extra_repr(self) -> str:
        return ""
