"""``Hash``: a reproducible hash of entries (tensors, strings, any object), per batch element.

Hashes identify states (e.g. for a tree search or a count-based bonus) without keeping them;
an optional repertoire maps hashes back to the values that produced them.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from torchrl._types import NestedKey
from torchrl.data.specs import Composite, Unbounded
from torchrl.envs.transforms._utils import key_list, missing_key_error, missing_spec_error
from torchrl.envs.transforms.base import Transform

__all__ = ["Hash"]


def _rows(value: Any, batch: torch.Size) -> list[Any]:
    """One item per element of ``batch`` (row-major)."""
    n = math.prod(batch)
    if isinstance(value, torch.Tensor):
        if not batch:
            return [value]
        return list(value.reshape(n, *value.shape[len(batch) :]).unbind(0))
    if isinstance(value, (NonTensorData, NonTensorStack)):
        value = value.tolist()
    items: list[Any] = [value]
    for _ in batch:
        items = [x for item in items for x in item]
    if len(items) != n:
        raise ValueError(f"Hash: {n} values expected for batch {list(batch)}, got {len(items)}")
    return items


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, torch.Tensor):
        item = item.detach().cpu().contiguous()
        head = f"{item.dtype}{list(item.shape)}".encode()
        return head + item.reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    return repr(item).encode()


class Hash(Transform):
    """Writes a hash of each ``in_keys`` entry to the matching ``out_keys`` entry.

    Each element of the TensorDict's batch is hashed on its own (a tensor by its dtype, shape
    and bytes; a string by its characters; anything else by its ``repr``), with ``hash_fn``
    (default :meth:`reproducible_hash`: SHA-256, 4 ``int64`` per element, the same in every
    process). With inverse keys, the inverse pass reads hashes at ``out_keys_inv`` and writes
    the values they came from at ``in_keys_inv``, looked up in ``repertoire`` (which every
    hashing call fills).

    Args:
        in_keys: the entries to hash.
        out_keys: where the hashes go.
        in_keys_inv: the entries the inverse pass restores.
        out_keys_inv: the hashes the inverse pass reads.
        hash_fn: ``hash_fn(value, seed) -> Tensor`` for one element (default:
            :meth:`reproducible_hash`).
        seed: passed to ``hash_fn``.
        use_raw_nontensor: pass non-tensor entries to ``hash_fn`` as they are (the whole entry,
            its result shaped ``[*batch, ...]``), instead of element by element.
        repertoire: a dict ``{tuple(hash): value}`` kept (not copied) and filled.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import Hash
        >>> t = Hash(in_keys=["obs"], out_keys=["hash"])
        >>> td = t(TensorDict(obs=torch.tensor([[1, 2], [1, 2], [3, 4]]), batch_size=[3]))
        >>> td["hash"].shape, bool((td["hash"][0] == td["hash"][1]).all())
        (torch.Size([3, 4]), True)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        *,
        hash_fn: Callable[..., torch.Tensor] | None = None,
        seed: Any | None = None,
        use_raw_nontensor: bool = False,
        repertoire: dict[tuple[int, ...], Any] | None = None,
    ) -> None:
        if not key_list(in_keys) or not key_list(out_keys):
            raise ValueError("Hash needs in_keys and out_keys")
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if hash_fn is not None and not callable(hash_fn):
            raise TypeError(f"Hash: hash_fn must be callable, got {hash_fn!r}")
        self.hash_fn = hash_fn if hash_fn is not None else Hash.reproducible_hash
        self.seed = seed
        self.use_raw_nontensor = bool(use_raw_nontensor)
        self.repertoire = repertoire if repertoire is not None else {}

    @staticmethod
    def reproducible_hash(value: Any, seed: Any | None = None) -> torch.Tensor:
        """A SHA-256 hash of ``value`` (bytes, a string or any object's ``repr``), as 4 int64.

        Args:
            value: what to hash.
            seed: mixed into the hash when given.

        Returns:
            An ``int64`` tensor of shape ``[4]``, the same in every process.
        """
        digest = hashlib.sha256()
        if seed is not None:
            digest.update(repr(seed).encode() + b"\x00")
        digest.update(_as_bytes(value))
        return torch.tensor(struct.unpack("<4q", digest.digest()), dtype=torch.int64)

    def _hash_one(self, item: Any) -> torch.Tensor:
        out = self.hash_fn(item, self.seed)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"Hash: hash_fn must return a tensor, got {type(out).__name__}")
        self.repertoire[tuple(out.reshape(-1).tolist())] = item
        return out

    def _hash(self, value: Any, batch: torch.Size) -> torch.Tensor:
        if self.use_raw_nontensor and isinstance(value, (NonTensorData, NonTensorStack)):
            return self.hash_fn(value, self.seed)
        hashes = [self._hash_one(item) for item in _rows(value, batch)]
        stacked = torch.stack(hashes)
        return stacked.reshape(*batch, *stacked.shape[1:])

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        batch = next_tensordict.batch_size
        for in_key, out_key in self._pairs:
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, in_key, next_tensordict)
            next_tensordict.set(out_key, self._hash(value, batch).to(next_tensordict.device))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call_tolerant(tensordict_reset)

    def get_input_from_hash(self, hash_tensor: torch.Tensor) -> Any:
        """The value that produced ``hash_tensor`` (one element's hash), or ``None``."""
        return self.repertoire.get(tuple(hash_tensor.reshape(-1).tolist()))

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        for in_key, out_key in self._inv_pairs:
            hashes = tensordict.get(out_key, None)
            if hashes is None:
                raise missing_key_error(self, out_key, tensordict)
            rows = hashes.reshape(math.prod(batch), -1).unbind(0) if batch else [hashes]
            values = [self.get_input_from_hash(h) for h in rows]
            missing = [i for i, v in enumerate(values) if v is None]
            if missing:
                raise KeyError(
                    f"Hash: {len(missing)} hash(es) of {out_key!r} are not in the repertoire "
                    f"(first at flat index {missing[0]})"
                )
            if all(isinstance(v, torch.Tensor) for v in values):
                stacked = torch.stack(values)
                tensordict.set(in_key, stacked.reshape(*batch, *stacked.shape[1:]))
            elif not batch:
                tensordict.set_non_tensor(in_key, values[0])
            else:
                tensordict.set(
                    in_key, NonTensorStack(*values, batch_size=[len(values)]).reshape(batch)
                )
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        sample = self.hash_fn(b"", self.seed)
        for in_key, out_key in self._pairs:
            if in_key not in observation_spec:
                raise missing_spec_error(
                    self,
                    in_key,
                    Composite(full_observation_spec=observation_spec),
                    ["full_observation_spec"],
                )
            observation_spec[out_key] = Unbounded(
                shape=(*observation_spec.shape, *sample.shape),
                dtype=sample.dtype,
                device=observation_spec.device,
            )
        return observation_spec
