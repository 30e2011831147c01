"""Writes of values already known to fit a TensorDict, without tensordict's checks.

An env step writes what its ``_step`` returned under ``"next"`` of the input, and a batched env
writes the entries of reset sub-envs into the next step's input: values made from the env's
specs or read from TensorDicts of the same batch size. For a plain ``TensorDict`` and a string
key these writes skip ``TensorDict.set``'s validation (:func:`torchrl._td_compat.set_unchecked`);
anything else goes through ``set``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT
from torchrl._td_compat import entries, set_unchecked
from torchrl._types import NestedKey

__all__ = ["set_leaf", "set_next"]


def set_leaf(tensordict: TensorDictBase, key: NestedKey, value: torch.Tensor) -> None:
    """``tensordict.set(key, value)``, skipping the checks for a value made from the env's specs.

    Args:
        tensordict: where to write.
        key: the entry's key.
        value: a tensor with the TensorDict's batch shape in front (a spec's ``rand()`` or
            ``zero()``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._writes import set_leaf
        >>> td = TensorDict(batch_size=[2])
        >>> set_leaf(td, "action", torch.zeros(2, 1))
        >>> td["action"].shape
        torch.Size([2, 1])
    """
    if type(tensordict) is TensorDict and type(key) is str:
        device = tensordict.device
        if device is None or device == value.device:
            set_unchecked(tensordict, key, value, inplace=False, validated=True)
            return
    tensordict.set(key, value)


def set_next(tensordict: TensorDictBase, next_td: TensorDictBase) -> None:
    """Writes a step's output ``next_td`` under ``"next"`` of the step's input ``tensordict``.

    Entries a policy wrote under ``"next"`` itself (a recurrent policy's next hidden state) are
    kept unless the env's output has them too: the env's outputs win.

    Args:
        tensordict: the step's input, batch ``[*B]``.
        next_td: what the env returned, batch ``[*B]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._writes import set_next
        >>> td = TensorDict(next=TensorDict(hidden=torch.ones(1)))
        >>> set_next(td, TensorDict(observation=torch.zeros(3)))
        >>> sorted(td["next"].keys())
        ['hidden', 'observation']
    """
    raw = entries(tensordict) if type(tensordict) is TensorDict else None
    previous = raw.get(NEXT) if raw is not None else tensordict.get(NEXT, None)
    if previous is not None:
        for key, value in previous.items():
            if key not in next_td.keys():
                next_td.set(key, value)
    if type(tensordict) is TensorDict and type(next_td) is TensorDict:
        device = tensordict.device
        if next_td.batch_size == tensordict.batch_size and (
            device is None or next_td.device == device
        ):
            # Batch size and device were just checked: skip tensordict's generic validation.
            set_unchecked(tensordict, NEXT, next_td, inplace=False, validated=True)
            return
    tensordict.set(NEXT, next_td)
