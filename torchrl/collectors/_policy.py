"""Policies inside collectors: wrapping plain modules, devices, and weights shared with workers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

from torchrl.envs.utils import RandomPolicy

PolicyFn = Callable[[TensorDictBase], "TensorDictBase | None"]


def random_policy(env: Any) -> RandomPolicy:
    """The policy used when a collector is given none: uniform actions from the env's spec."""
    keys = env.action_keys
    if len(keys) == 1:
        return RandomPolicy(env.full_action_spec[keys[0]], action_key=keys[0])
    return RandomPolicy(env.full_action_spec)


def wrap_policy(policy: Any, env: Any, trust_policy: bool) -> Any:
    """Makes ``policy`` a TensorDict-in, TensorDict-out callable.

    A ``TensorDictModuleBase`` is used as is. An ``nn.Module`` whose ``forward`` arguments are
    observation keys of the env (or that takes one argument when the env has one observation)
    is wrapped in a ``TensorDictModule`` writing the env's action keys. Any other callable is
    taken to map a TensorDict to a TensorDict (or to write into it and return ``None``).
    """
    if policy is None:
        return random_policy(env)
    if trust_policy or isinstance(policy, TensorDictModuleBase):
        return policy
    if not callable(policy):
        raise TypeError(f"collector: the policy must be callable, got {type(policy).__name__}")
    if isinstance(policy, nn.Module):
        try:
            params = list(inspect.signature(policy.forward).parameters.values())
        except (TypeError, ValueError):
            return policy
        names = [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        obs_keys = [k for k in env.observation_keys if isinstance(k, str)]
        in_keys: list[Any] = list(names)
        if names and all(n in obs_keys for n in names):
            return TensorDictModule(policy, in_keys=in_keys, out_keys=env.action_keys)
        single = len(env.observation_keys) == 1
        if len(names) == 1 and single and names[0] not in ("tensordict", "td"):
            return TensorDictModule(
                policy, in_keys=list(env.observation_keys), out_keys=env.action_keys
            )
    return policy


def device_of(policy: Any) -> torch.device | None:
    """The device of the policy's first parameter or buffer (``None`` when it has none)."""
    if not isinstance(policy, nn.Module):
        return None
    for param in policy.parameters():
        return param.device
    for buffer in policy.buffers():
        return buffer.device
    return None


class DevicePolicy:
    """Runs a policy on another device than the env's, moving data there and back.

    Args:
        policy: the policy (its parameters on ``device``).
        device: the policy's device.
        env_device: where the env's data lives.
    """

    def __init__(self, policy: Any, device: torch.device, env_device: torch.device | None) -> None:
        self.policy = policy
        self.device = device
        self.env_device = env_device

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        moved = td.to(self.device)
        out = self.policy(moved)
        out = moved if out is None else out
        if self.env_device is not None:
            out = out.to(self.env_device)
        return td.update(out)


def named_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters and buffers of ``module`` by name (tied tensors once)."""
    out: dict[str, torch.Tensor] = {}
    for name, p in module.named_parameters():
        out[name] = p
    for name, b in module.named_buffers():
        if b is not None:
            out[name] = b
    return out


def share_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """Copies the weights of ``module`` into fresh CPU shared-memory tensors."""
    with torch.no_grad():
        return {
            name: t.detach().to("cpu", copy=True).share_memory_()
            for name, t in named_weights(module).items()
        }


def bind_weights(module: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Makes ``module`` read its parameters and buffers from ``weights`` (no copy).

    Only tensors on the same device as the weights are bound; others get a copy.
    """
    current = named_weights(module)
    missing = sorted(set(weights) - set(current))
    if missing:
        raise KeyError(f"collector: the worker's policy has no weights named {missing}")
    with torch.no_grad():
        for name, tensor in current.items():
            source = weights.get(name)
            if source is None:
                continue
            if tensor.device == source.device and tensor.dtype == source.dtype:
                tensor.data = source
            else:
                tensor.copy_(source)


def copy_weights(dest: dict[str, torch.Tensor], source: Any) -> None:
    """Copies weights in place into ``dest`` from a module, a state dict or a TensorDict."""
    if isinstance(source, nn.Module):
        items = named_weights(source)
    elif isinstance(source, TensorDictBase):
        items = {
            ".".join(k) if isinstance(k, tuple) else k: cast(torch.Tensor, v)
            for k, v in source.items(True, True)
        }
    elif isinstance(source, dict):
        items = dict(source)
    else:
        raise TypeError(
            f"update_policy_weights_ takes a module, a state dict or a TensorDict of weights, "
            f"got {type(source).__name__}"
        )
    unknown = sorted(set(items) - set(dest))
    if unknown:
        raise KeyError(f"update_policy_weights_: the policy has no weights named {unknown}")
    with torch.no_grad():
        for name, value in items.items():
            dest[name].copy_(value.detach())
