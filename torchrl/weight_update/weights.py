"""Weights as named tensors: reading them from a model, sharing, binding and copying them.

Every scheme of :mod:`torchrl.weight_update` moves weights as a flat ``{name: tensor}`` mapping,
names being those of ``nn.Module.named_parameters`` / ``named_buffers`` (dotted). These helpers
turn a module, a state dict or a TensorDict of weights into that form and load it back; the
collectors use them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch
from tensordict import TensorDictBase
from torch import nn

#: Weights: a module, a state dict or a TensorDict of weights (keys joined by dots).
WeightsLike = nn.Module | Mapping[str, torch.Tensor] | TensorDictBase

__all__ = [
    "WeightsLike",
    "bind_weights",
    "copy_weights",
    "flat_weights",
    "named_weights",
    "policy_weights",
    "share_weights",
]


def named_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters and buffers of ``module`` by name (tied tensors once).

    Examples:
        >>> sorted(named_weights(torch.nn.Linear(2, 1)))
        ['bias', 'weight']
    """
    out: dict[str, torch.Tensor] = {}
    for name, p in module.named_parameters():
        out[name] = p
    for name, b in module.named_buffers():
        if b is not None:
            out[name] = b
    return out


def flat_weights(source: WeightsLike, what: str = "weights") -> dict[str, torch.Tensor]:
    """``{dotted name: tensor}`` of a module, a state dict or a TensorDict (no copy).

    Args:
        source: a module, a mapping of names to tensors, or a TensorDict (nested keys are
            joined with dots).
        what: how to call ``source`` in an error message.

    Returns:
        The tensors by name (the module's own tensors for a module).

    Examples:
        >>> from tensordict import TensorDict
        >>> sorted(flat_weights(TensorDict({"0": {"bias": torch.zeros(1)}}, [])))
        ['0.bias']
    """
    if isinstance(source, nn.Module):
        return named_weights(source)
    if isinstance(source, TensorDictBase):
        return {
            ".".join(k) if isinstance(k, tuple) else k: cast(torch.Tensor, v)
            for k, v in source.items(True, True)
        }
    if isinstance(source, Mapping):
        out = dict(source)
        bad = sorted(str(k) for k, v in out.items() if not isinstance(v, torch.Tensor))
        if bad:
            raise TypeError(f"{what}: the entries {bad} are not tensors")
        return out
    raise TypeError(
        f"{what} must be a module, a state dict or a TensorDict of weights, got "
        f"{type(source).__name__}"
    )


def share_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """Copies the weights of ``module`` into fresh CPU shared-memory tensors."""
    with torch.no_grad():
        return {
            name: t.detach().to("cpu", copy=True).share_memory_()
            for name, t in named_weights(module).items()
        }


def policy_weights(policy: object) -> dict[str, torch.Tensor]:
    """Detached CPU copies of a policy's parameters and buffers, by name.

    Args:
        policy: an ``nn.Module``, a state dict or a TensorDict of weights (anything else has
            no weights: an empty dict comes back).

    Returns:
        ``{name: tensor}``, the tensors contiguous on the CPU, safe to send to other processes.

    Examples:
        >>> sorted(policy_weights(torch.nn.Linear(2, 1)))
        ['bias', 'weight']
    """
    if not isinstance(policy, (nn.Module, Mapping, TensorDictBase)):
        return {}
    with torch.no_grad():
        return {
            name: t.detach().to("cpu", copy=True).contiguous()
            for name, t in flat_weights(policy).items()
        }


def bind_weights(module: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Makes ``module`` read its parameters and buffers from ``weights`` (no copy).

    Only tensors on the same device (and of the same dtype) as the weights are bound; others
    get a copy.
    """
    current = named_weights(module)
    missing = sorted(set(weights) - set(current))
    if missing:
        raise KeyError(f"bind_weights: the module has no weights named {missing}")
    with torch.no_grad():
        for name, tensor in current.items():
            source = weights.get(name)
            if source is None:
                continue
            if tensor.device == source.device and tensor.dtype == source.dtype:
                tensor.data = source
            else:
                tensor.copy_(source)


def copy_weights(dest: Mapping[str, torch.Tensor], source: WeightsLike) -> None:
    """Copies weights in place into ``dest`` from a module, a state dict or a TensorDict.

    Args:
        dest: the tensors to write, by name.
        source: the new weights (a subset of ``dest``'s names; a tensor that is already the
            destination is left alone).

    Examples:
        >>> dest = {"bias": torch.zeros(1)}
        >>> copy_weights(dest, {"bias": torch.ones(1)})
        >>> dest["bias"]
        tensor([1.])
    """
    items = flat_weights(source, "update_policy_weights_: the weights")
    unknown = sorted(set(items) - set(dest))
    if unknown:
        raise KeyError(f"update_policy_weights_: the policy has no weights named {unknown}")
    with torch.no_grad():
        for name, value in items.items():
            target = dest[name]
            if value is target or (
                value.data_ptr() == target.data_ptr()
                and value.device == target.device
                and value.shape == target.shape
                and value.stride() == target.stride()
            ):
                continue  # already the destination itself
            if value.shape != target.shape:
                raise ValueError(
                    f"update_policy_weights_: weight {name!r} has shape {tuple(value.shape)}, "
                    f"the policy's has {tuple(target.shape)}"
                )
            target.copy_(value.detach())
