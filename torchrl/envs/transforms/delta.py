"""``NextObservationDelta``: stores next observations as low-precision differences.

The same transform works on both sides: in the env it adds ``("next", "delta", key)``; in a
replay buffer it drops ``("next", key)`` from written data and rebuilds it from
``key + delta`` on samples, so a buffer holds each observation once at full precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.data.specs import Composite, Unbounded
from torchrl.envs.transforms._utils import get, key_tuple, missing_key_error, set_
from torchrl.envs.transforms.base import Transform

__all__ = ["NextObservationDelta"]

_DELTA = "delta"
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


def _delta_key(key: NestedKey) -> tuple[str, ...]:
    return (_DELTA, *key_tuple(key))


class NextObservationDelta(Transform):
    """Adds ``("next", "delta", key) = (next_obs - obs)`` in ``delta_dtype`` for each observation
    key; in a replay buffer, keeps only the delta of the next observation.

    In an env, the delta is written next to the full next observation (the policy keeps reading
    the full one; reset outputs hold a zero delta). In a replay buffer (the same instance, or one
    with the same keys): written data loses ``("next", key)`` where the delta is present
    (:meth:`inv`), and samples get ``("next", key) = key + delta`` back (``forward``), in the
    root entry's dtype (or ``restore_dtype``); the delta is then dropped (``drop_delta``).

    Args:
        in_keys: the observation keys (default: every float observation of the env whose dtype
            is not in ``excluded_dtypes``; outside an env, the keys found under
            ``("next", "delta")``).
        delta_dtype: the dtype of the stored differences.
        restore_dtype: the dtype of rebuilt next observations (``"root"``: the root entry's).
        drop_delta: remove the delta entries from samples after rebuilding.
        excluded_dtypes: dtypes never compressed (integers and booleans by default).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import NextObservationDelta
        >>> t = NextObservationDelta(["obs"], delta_dtype=torch.float32)
        >>> td = TensorDict(obs=torch.zeros(2), next=TensorDict(obs=torch.ones(2)))
        >>> td["next", "delta", "obs"] = td["next", "obs"] - td["obs"]
        >>> stored = t.inv(td)
        >>> "obs" in stored["next"].keys(), t(stored)["next", "obs"]
        (False, tensor([1., 1.]))
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        delta_dtype: torch.dtype = torch.float16,
        restore_dtype: torch.dtype | Literal["root"] = "root",
        drop_delta: bool = True,
        excluded_dtypes: tuple[torch.dtype, ...] = _INT_DTYPES,
    ) -> None:
        if not isinstance(delta_dtype, torch.dtype):
            raise TypeError(
                f"NextObservationDelta: delta_dtype must be a dtype, got {delta_dtype!r}"
            )
        if restore_dtype != "root" and not isinstance(restore_dtype, torch.dtype):
            raise TypeError(
                "NextObservationDelta: restore_dtype must be a dtype or 'root', got "
                f"{restore_dtype!r}"
            )
        super().__init__(in_keys=in_keys)
        self._explicit = in_keys is not None
        self.delta_dtype = delta_dtype
        self.restore_dtype = restore_dtype
        self.drop_delta = bool(drop_delta)
        self.excluded_dtypes = tuple(excluded_dtypes)

    def _keys(self, tensordict: TensorDictBase) -> list[NestedKey]:
        if self._in_keys:
            return self._in_keys
        deltas = tensordict.get((NEXT, _DELTA), None)
        if not isinstance(deltas, TensorDictBase):
            return []
        return list(deltas.keys(include_nested=True, leaves_only=True))

    # ------------------------------------------------------------------------- env side
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._in_keys:
            obs = get(tensordict, key)
            if obs is None:
                raise missing_key_error(self, key, tensordict)
            nxt = get(next_tensordict, key)
            if nxt is None:
                raise missing_key_error(self, key, next_tensordict)
            next_tensordict.set(_delta_key(key), (nxt - obs).to(self.delta_dtype))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for key in self._in_keys:
            obs = get(tensordict_reset, key)
            if obs is not None:
                tensordict_reset.set(_delta_key(key), torch.zeros_like(obs, dtype=self.delta_dtype))
        return tensordict_reset

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        if not self._explicit:
            self._in_keys = [
                key
                for key in observation_spec.keys(include_nested=True, leaves_only=True)
                if key_tuple(key)[0] != _DELTA
                and observation_spec[key].dtype is not None
                and observation_spec[key].dtype.is_floating_point
                and observation_spec[key].dtype not in self.excluded_dtypes
            ]
            self._update_pairs()
        for key in self._in_keys:
            if key not in observation_spec:
                raise KeyError(
                    f"NextObservationDelta: {key!r} is not in the env's observation spec "
                    f"(keys: {list(observation_spec.keys(True, True))})"
                )
            leaf = observation_spec[key]
            observation_spec[_delta_key(key)] = Unbounded(
                shape=leaf.shape, dtype=self.delta_dtype, device=leaf.device
            )
        return observation_spec

    # ---------------------------------------------------------------------- buffer side
    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._keys(tensordict):
            full_key = (NEXT, *key_tuple(key))
            if tensordict.get((NEXT, *_delta_key(key)), None) is not None:
                if tensordict.get(full_key, None) is not None:
                    del tensordict[full_key]
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rebuilds ``("next", key)`` from ``key`` and its delta (buffer samples)."""
        for key in self._keys(tensordict):
            delta_key = (NEXT, *_delta_key(key))
            delta = tensordict.get(delta_key, None)
            if delta is None:
                raise missing_key_error(self, delta_key, tensordict)
            root = get(tensordict, key)
            if root is None:
                raise missing_key_error(self, key, tensordict)
            dtype = root.dtype if self.restore_dtype == "root" else self.restore_dtype
            set_(tensordict, (NEXT, *key_tuple(key)), root.to(dtype) + delta.to(dtype))
            if self.drop_delta:
                del tensordict[delta_key]
        if self.drop_delta:
            deltas = tensordict.get((NEXT, _DELTA), None)
            if isinstance(deltas, TensorDictBase) and deltas.is_empty():
                del tensordict[(NEXT, _DELTA)]
        return tensordict

    def extra_repr(self) -> str:
        return f"in_keys={self._in_keys}, delta_dtype={self.delta_dtype}"
