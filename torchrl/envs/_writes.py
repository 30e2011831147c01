"""Writes of values already known to fit a TensorDict, without tensordict's checks.

An env step writes what its ``_step`` returned under ``"next"`` of the input, and a batched env
writes the entries of reset sub-envs into the next step's input: values made from the env's
specs or read from TensorDicts of the same batch size. For a plain ``TensorDict`` and a string
key these writes skip ``TensorDict.set``'s validation (:func:`torchrl._td_compat.set_unchecked`);
anything else goes through ``set``. A step with a ``"_step"`` mask (:data:`STEP_MASK`) keeps
the entries of the sub-envs it left out (:func:`keep_skipped`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT
from torchrl._td_compat import entries, set_unchecked
from torchrl._types import NestedKey

__all__ = ["STEP_MASK", "keep_skipped", "set_leaf", "set_next", "step_mask"]

#: The key of a step's boolean mask: sub-envs where it is ``False`` are not stepped.
STEP_MASK = "_step"


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
        # the keys of next_td, looked up once (previous's keys are distinct strings)
        present = entries(next_td) if type(next_td) is TensorDict else next_td.keys()
        for key, value in previous.items():
            if key not in present:
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


def step_mask(owner: str, value: Any, batch_size: torch.Size) -> torch.Tensor:
    """A ``"_step"`` entry checked and shaped as the env's batch: bool, ``[*B]`` (or ``[*B, 1]``).

    Args:
        owner: the env's name, for the error message.
        value: the entry read from the step input.
        batch_size: the env's batch size ``B``.

    Returns:
        A bool tensor of shape ``B``.

    Raises:
        ValueError: the entry is not a bool tensor of shape ``[*B]`` or ``[*B, 1]``.

    Examples:
        >>> import torch
        >>> from torchrl.envs._writes import step_mask
        >>> step_mask("MyEnv", torch.tensor([[True], [False]]), torch.Size([2]))
        tensor([ True, False])
    """
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        got = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"{owner}.step: the {STEP_MASK!r} entry must be a bool tensor, got {got}")
    shape = value.shape
    if shape == batch_size:
        return value
    if len(shape) == len(batch_size) + 1 and shape[-1] == 1 and shape[:-1] == batch_size:
        return value.squeeze(-1)
    raise ValueError(
        f"{owner}.step: the {STEP_MASK!r} entry has shape {list(shape)}; expected the env's "
        f"batch size {list(batch_size)} (optionally with a trailing 1)"
    )


def keep_skipped(
    next_td: TensorDictBase,
    tensordict: TensorDictBase,
    mask: torch.Tensor,
    reward_keys: Sequence[NestedKey],
    done_keys: Sequence[NestedKey],
) -> None:
    """Overwrites, in a step's output, the entries of the sub-envs that did not step.

    A skipped sub-env (``mask`` ``False``) keeps its input's values: each entry of ``next_td``
    takes the value of the same key in ``tensordict`` when it has one; a reward is zero and a
    done flag missing from the input is ``False``. Entries with no counterpart keep the env's
    value.

    Args:
        next_td: the step's output, batch ``[*B]``; updated in place.
        tensordict: the step's input, batch ``[*B]``.
        mask: bool, shape ``B``: ``True`` where the sub-env stepped.
        reward_keys: the env's reward keys.
        done_keys: the env's done keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._writes import keep_skipped
        >>> out = TensorDict(obs=torch.ones(2, 1), reward=torch.ones(2, 1), batch_size=[2])
        >>> inp = TensorDict(obs=torch.zeros(2, 1), batch_size=[2])
        >>> keep_skipped(out, inp, torch.tensor([True, False]), ["reward"], [])
        >>> out["obs"].squeeze(-1), out["reward"].squeeze(-1)
        (tensor([1., 0.]), tensor([1., 0.]))
    """
    rewards = {_as_tuple(k) for k in reward_keys}
    dones = {_as_tuple(k) for k in done_keys}
    batch_dims = mask.ndim
    for key in list(next_td.keys(include_nested=True, leaves_only=True)):
        new = next_td.get(key)
        if not isinstance(new, torch.Tensor):
            continue
        if _as_tuple(key) in rewards:
            old = torch.zeros((), dtype=new.dtype, device=new.device)
        else:
            old = tensordict.get(key, None)
            if old is None:
                if _as_tuple(key) not in dones:
                    continue
                old = torch.zeros((), dtype=new.dtype, device=new.device)
            elif not isinstance(old, torch.Tensor) or old.shape != new.shape:
                continue
        where = mask.reshape(tuple(mask.shape) + (1,) * (new.ndim - batch_dims)).to(new.device)
        next_td.set(key, torch.where(where, new, old.to(new.dtype)))


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)
