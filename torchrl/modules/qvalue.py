"""Greedy Q-value policies: action values -> action, for plain and distributional Q-learning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn

from torchrl._keys import ACTION, ACTION_VALUE, OBSERVATION
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import (
    as_composite,
    leaf_spec,
    module_keys,
    project_keys,
    spec_kind,
)

#: Default key of the value of the greedy action (``[*B, 1]``).
CHOSEN_ACTION_VALUE = "chosen_action_value"

_ACTION_SPACES = ("one_hot", "categorical", "mult_one_hot", "multi_categorical")

if TYPE_CHECKING:
    from torchrl.data.specs.base import TensorSpec


def _resolve_action_space(
    action_space: str | TensorSpec | None, spec: TensorSpec | None, action_key: NestedKey
) -> str:
    if action_space is None:
        if spec is None:
            raise ValueError(
                "pass action_space ('one_hot', 'categorical', 'mult_one_hot', "
                "'multi_categorical') or a spec to infer it from"
            )
        action_space = leaf_spec(spec, action_key)
    if not isinstance(action_space, str):
        action_space = spec_kind(action_space)
    if action_space not in _ACTION_SPACES:
        raise ValueError(f"action_space must be one of {_ACTION_SPACES}, got {action_space!r}")
    return action_space


def _greedy_index(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"the action mask must be boolean, got {mask.dtype}")
        values = values.masked_fill(~mask.expand_as(values), -torch.inf)
    return values.argmax(-1)


class _GreedyBase(TensorDictModuleBase):
    """Shared key/spec handling of the Q-value modules."""

    def __init__(
        self,
        action_space: str | TensorSpec | None,
        action_value_key: NestedKey | None,
        action_mask_key: NestedKey | None,
        out_keys: Sequence[NestedKey] | None,
        default_out_keys: list[NestedKey],
        var_nums: Sequence[int] | int | None,
        spec: TensorSpec | None,
        safe: bool,
    ) -> None:
        super().__init__()
        self.action_value_key = ACTION_VALUE if action_value_key is None else action_value_key
        self.action_mask_key = action_mask_key
        self.in_keys = module_keys(
            [self.action_value_key] + ([action_mask_key] if action_mask_key else [])
        )
        self.out_keys = module_keys(default_out_keys if out_keys is None else out_keys)
        self.action_key = self.out_keys[0]
        self.action_space = _resolve_action_space(action_space, spec, self.action_key)
        if self.action_space in ("mult_one_hot", "multi_categorical"):
            if var_nums is None:
                leaf = leaf_spec(spec, self.action_key) if spec is not None else None
                nvec = getattr(leaf, "nvec", None) if leaf is not None else None
                if nvec is None:
                    raise ValueError(f"action_space={self.action_space!r} needs var_nums")
                var_nums = list(nvec)
            self.var_nums: list[int] | None = (
                [var_nums] if isinstance(var_nums, int) else [int(v) for v in var_nums]
            )
        else:
            self.var_nums = None
        if safe and spec is None:
            raise ValueError("safe=True needs a spec")
        self.spec = as_composite(spec, self.out_keys)
        self.safe = safe
        leaf = leaf_spec(self.spec, self.action_key) if self.spec is not None else None
        self._action_dtype = getattr(leaf, "dtype", None)

    def _action_from_values(
        self, values: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(action, chosen_action_value)`` for ``[*B, n]`` action values."""
        if self.var_nums is None:
            index = _greedy_index(values, mask)
            chosen = values.gather(-1, index.unsqueeze(-1))
            if self.action_space == "one_hot":
                action = nn.functional.one_hot(index, values.shape[-1])
            else:
                action = index
        else:
            if sum(self.var_nums) != values.shape[-1]:
                raise ValueError(
                    f"var_nums {self.var_nums} do not add up to the {values.shape[-1]} action values"
                )
            masks = (
                mask.split(self.var_nums, -1) if mask is not None else [None] * len(self.var_nums)
            )
            indices = [_greedy_index(v, m) for v, m in zip(values.split(self.var_nums, -1), masks)]
            chosen = torch.stack(
                [
                    v.gather(-1, i.unsqueeze(-1))
                    for v, i in zip(values.split(self.var_nums, -1), indices)
                ],
                -1,
            ).sum(-1)
            if self.action_space == "mult_one_hot":
                action = torch.cat(
                    [nn.functional.one_hot(i, n) for i, n in zip(indices, self.var_nums)], -1
                )
            else:
                action = torch.stack(indices, -1)
        if self._action_dtype is not None:
            action = action.to(self._action_dtype)
        return action, chosen

    def _mask(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        if self.action_mask_key is None:
            return None
        mask = tensordict.get(self.action_mask_key, None)
        if mask is None:
            raise KeyError(
                f"action_mask_key={self.action_mask_key!r} is not in the tensordict "
                f"(keys: {list(tensordict.keys(True, True))})"
            )
        return mask


class QValueModule(_GreedyBase):
    """Greedy action from action values: ``"action_value"`` -> ``"action"`` (+ chosen value).

    Masked actions (``action_mask_key``, True = allowed) are never chosen.

    Args:
        action_space: ``"one_hot"``, ``"categorical"``, ``"mult_one_hot"`` or
            ``"multi_categorical"``, or a spec to infer it from (else ``spec`` is used).
        action_value_key: where the ``[*B, n_actions]`` values are (``"action_value"``).
        action_mask_key: optional boolean mask of allowed actions ``[*B, n_actions]``.
        out_keys: ``[action, action_value, chosen_action_value]`` keys.
        var_nums: sizes of the sub-actions of the multi-discrete action spaces.
        spec: the action spec (its dtype is used for the action).
        safe: project the action into the spec.

    Examples:
        >>> from tensordict import TensorDict
        >>> qv = QValueModule("one_hot", action_mask_key="action_mask")
        >>> td = TensorDict(action_value=torch.tensor([[1.0, 5.0, 2.0]]),
        ...                 action_mask=torch.tensor([[True, False, True]]), batch_size=[1])
        >>> qv(td)["action"], td["chosen_action_value"]
        (tensor([[0, 0, 1]]), tensor([[2.]]))
    """

    def __init__(
        self,
        action_space: str | TensorSpec | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: Sequence[int] | int | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
    ) -> None:
        value_key = ACTION_VALUE if action_value_key is None else action_value_key
        super().__init__(
            action_space,
            value_key,
            action_mask_key,
            out_keys,
            [ACTION, value_key, CHOSEN_ACTION_VALUE],
            var_nums,
            spec,
            safe,
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = tensordict.get(self.action_value_key)
        action, chosen = self._action_from_values(values, self._mask(tensordict))
        tensordict.set(self.out_keys[0], action)
        if len(self.out_keys) > 1 and self.out_keys[1] != self.action_value_key:
            tensordict.set(self.out_keys[1], values)
        if len(self.out_keys) > 2:
            tensordict.set(self.out_keys[2], chosen)
        if self.safe:
            project_keys(tensordict, self.spec, self.out_keys[:1])
        return tensordict


class DistributionalQValueModule(_GreedyBase):
    """Greedy action from return distributions (C51): ``[*B, n_atoms, n_actions]`` log-probs.

    The Q-value of an action is ``sum_atoms exp(log_p) * support``.

    Args:
        action_space: as in :class:`QValueModule`.
        support: the ``[n_atoms]`` return values of the atoms.
        action_value_key: where the log-probabilities are (``"action_value"``).
        action_mask_key: optional boolean mask of allowed actions ``[*B, n_actions]``.
        out_keys: ``[action, action_value]`` keys.
        var_nums: sizes of the sub-actions of the multi-discrete action spaces.
        spec: the action spec.
        safe: project the action into the spec.

    Examples:
        >>> from tensordict import TensorDict
        >>> support = torch.tensor([0.0, 10.0])
        >>> log_p = torch.tensor([[[0.9, 0.1], [0.1, 0.9]]]).log()  # action 1 puts mass on 10
        >>> mod = DistributionalQValueModule("categorical", support)
        >>> mod(TensorDict(action_value=log_p, batch_size=[1]))["action"]
        tensor([1])
    """

    support: torch.Tensor

    def __init__(
        self,
        action_space: str | TensorSpec | None,
        support: torch.Tensor,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: Sequence[int] | int | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
    ) -> None:
        value_key = ACTION_VALUE if action_value_key is None else action_value_key
        super().__init__(
            action_space,
            value_key,
            action_mask_key,
            out_keys,
            [ACTION, value_key],
            var_nums,
            spec,
            safe,
        )
        self.register_buffer("support", torch.as_tensor(support, dtype=torch.float32))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        log_p = tensordict.get(self.action_value_key)
        if log_p.ndim < 2 or log_p.shape[-2] != self.support.numel():
            raise ValueError(
                f"expected {self.action_value_key!r} of shape [*B, n_atoms={self.support.numel()},"
                f" n_actions], got {tuple(log_p.shape)}"
            )
        q_values = (log_p.exp() * self.support.to(log_p.dtype).unsqueeze(-1)).sum(-2)
        action, _ = self._action_from_values(q_values, self._mask(tensordict))
        tensordict.set(self.out_keys[0], action)
        if len(self.out_keys) > 1 and self.out_keys[1] != self.action_value_key:
            tensordict.set(self.out_keys[1], log_p)
        if self.safe:
            project_keys(tensordict, self.spec, self.out_keys[:1])
        return tensordict


def _value_net(
    module: nn.Module, in_keys: Sequence[NestedKey] | None, value_key: NestedKey
) -> TensorDictModuleBase:
    if isinstance(module, TensorDictModuleBase):
        if value_key not in module.out_keys:
            raise KeyError(
                f"the module writes {module.out_keys}, but the Q-value module reads {value_key!r}"
            )
        return module
    return TensorDictModule(module, in_keys=list(in_keys or [OBSERVATION]), out_keys=[value_key])


class QValueActor(TensorDictSequential):
    """A Q-network followed by a :class:`QValueModule`: observation -> greedy action.

    Args:
        module: the Q-network (``nn.Module`` reading ``in_keys``, or a tensordict module that
            writes ``action_value_key``).
        in_keys: keys read by a plain ``nn.Module`` (default ``["observation"]``).
        spec: the action spec.
        safe: project the action into the spec.
        action_space: see :class:`QValueModule` (inferred from ``spec`` when omitted).
        action_value_key: key of the action values (``"action_value"``).
        action_mask_key: optional key of the boolean mask of allowed actions.

    Examples:
        >>> from tensordict import TensorDict
        >>> actor = QValueActor(nn.Linear(4, 3), action_space="categorical")
        >>> td = actor(TensorDict(observation=torch.randn(5, 4), batch_size=[5]))
        >>> td["action"].shape, td["action_value"].shape, td["chosen_action_value"].shape
        (torch.Size([5]), torch.Size([5, 3]), torch.Size([5, 1]))
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        action_space: str | TensorSpec | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
    ) -> None:
        value_key = ACTION_VALUE if action_value_key is None else action_value_key
        greedy = QValueModule(
            action_space=action_space,
            action_value_key=value_key,
            action_mask_key=action_mask_key,
            spec=spec,
            safe=safe,
        )
        super().__init__(_value_net(module, in_keys, value_key), greedy)
        self.spec = greedy.spec


class DistributionalQValueActor(TensorDictSequential):
    """A distributional Q-network followed by a :class:`DistributionalQValueModule`.

    Args:
        module: network writing ``[*B, n_atoms, n_actions]`` logits.
        support: the ``[n_atoms]`` atom values.
        in_keys: keys read by a plain ``nn.Module`` (default ``["observation"]``).
        spec: the action spec.
        safe: project the action into the spec.
        action_space: see :class:`QValueModule`.
        action_value_key: key of the log-probabilities (``"action_value"``).
        action_mask_key: optional key of the boolean mask of allowed actions.
        make_log_softmax: normalise the logits over atoms (log-softmax over dim -2).

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import MLP
        >>> net = MLP(in_features=4, out_features=(11, 3), depth=1)  # 11 atoms, 3 actions
        >>> actor = DistributionalQValueActor(net, torch.linspace(-5, 5, 11), action_space="one_hot")
        >>> td = actor(TensorDict(observation=torch.randn(2, 4), batch_size=[2]))
        >>> td["action"].shape, bool(td["action_value"].exp().sum(-2).allclose(torch.ones(2, 3)))
        (torch.Size([2, 3]), True)
    """

    def __init__(
        self,
        module: nn.Module,
        support: torch.Tensor,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        action_space: str | TensorSpec | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        make_log_softmax: bool = True,
    ) -> None:
        value_key = ACTION_VALUE if action_value_key is None else action_value_key
        net = _value_net(module, in_keys, value_key)
        modules: list[TensorDictModuleBase] = [net]
        if make_log_softmax:
            modules.append(
                TensorDictModule(_LogSoftmaxAtoms(), in_keys=[value_key], out_keys=[value_key])
            )
        greedy = DistributionalQValueModule(
            action_space=action_space,
            support=support,
            action_value_key=value_key,
            action_mask_key=action_mask_key,
            spec=spec,
            safe=safe,
        )
        super().__init__(*modules, greedy)
        self.spec = greedy.spec


class _LogSoftmaxAtoms(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.log_softmax(-2)
