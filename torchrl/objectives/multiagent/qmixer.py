"""Value-decomposition loss for cooperative multi-agent Q-learning (VDN / QMIX)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import dispatch
from torch import Tensor

from torchrl._keys import (
    ACTION,
    ACTION_VALUE,
    ADVANTAGE,
    DONE,
    NEXT,
    PRIORITY,
    REWARD,
    TERMINATED,
    VALUE_TARGET,
)
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    check_loss_function,
    check_reduction,
    find_mask_key,
    gather_action_values,
    masked_argmax,
    reduce_loss,
    resolve_action_space,
    without_greedy_head,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.utils import ValueEstimators, distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["QMixerLoss"]

_AGENTS = "agents"
_CHOSEN = "chosen_action_value"


class QMixerLoss(LossModule):
    """QMIX / VDN: a DQN loss on the mixed value of the agents' chosen action values.

    Each agent's value ``Q_k(o_k, a_k)`` (from ``local_value_network``, ``[*B, n_agents, n]``
    action values gathered at the stored actions) is mixed by ``mixer_network`` (e.g.
    :class:`~torchrl.modules.QMixer` reading the global state) into ``Q_tot`` (``[*B, 1]``).
    ``y = r + gamma (1 - terminated) mix_target(max_a Q_target_k(o'_k, a))`` (masked when the
    local network reads an action mask) and ``loss = d(Q_tot, y)``.

    Args:
        local_value_network: writes the per-agent action values (e.g. a ``QValueActor`` on
            ``("agents", "observation")`` with nested keys).
        mixer_network: a tensordict module reading the local chosen values (first in key) and
            writing the global value (first out key).
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        delay_value: keep target parameters for both networks.
        action_space: ``"one_hot"`` or ``"categorical"`` (inferred from the local network).
        priority_key: where to write the TD error.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import VDNMixer
        >>> local = TensorDictModule(nn.Linear(3, 2), [("agents", "observation")],
        ...                          [("agents", "action_value")])
        >>> mixer = TensorDictModule(VDNMixer(n_agents=4), [("agents", "chosen_action_value")],
        ...                          ["chosen_action_value"])
        >>> loss = QMixerLoss(local, mixer, action_space="categorical")
        >>> td = TensorDict({"agents": TensorDict(observation=torch.randn(8, 4, 3),
        ...     action=torch.randint(2, (8, 4)), batch_size=[8, 4]),
        ...     "next": {"agents": TensorDict(observation=torch.randn(8, 4, 3), batch_size=[8, 4]),
        ...     "reward": torch.randn(8, 1), "done": torch.zeros(8, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
        >>> loss(td)["loss"].shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`QMixerLoss`."""

        advantage: NestedKey = ADVANTAGE
        value_target: NestedKey = VALUE_TARGET
        local_value: NestedKey = (_AGENTS, _CHOSEN)
        global_value: NestedKey = _CHOSEN
        action_value: NestedKey = (_AGENTS, ACTION_VALUE)
        action: NestedKey = (_AGENTS, ACTION)
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)

    def __init__(
        self,
        local_value_network: Any,
        mixer_network: Any,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        for name, net in (
            ("local_value_network", local_value_network),
            ("mixer_network", mixer_network),
        ):
            if not (hasattr(net, "in_keys") and hasattr(net, "out_keys")):
                raise TypeError(
                    f"QMixerLoss: {name} must be a tensordict module, got {type(net).__name__}"
                )
        self.action_space = resolve_action_space("QMixerLoss", action_space, local_value_network)
        self.convert_to_functional(
            local_value_network, "local_value_network", create_target_params=delay_value
        )
        self.convert_to_functional(mixer_network, "mixer_network", create_target_params=delay_value)
        keys = self._tensor_keys
        for sub in local_value_network.modules():
            value_key = getattr(sub, "action_value_key", None)
            if value_key is not None:
                keys.action_value = value_key
                if getattr(sub, "out_keys", None):
                    keys.action = sub.out_keys[0]
                break
        else:
            self._adopt_out_key("action_value", local_value_network)
        keys.local_value = mixer_network.in_keys[0]
        self._adopt_out_key("global_value", mixer_network)
        if priority_key is not None:
            keys.priority = priority_key
        self._mask_key = find_mask_key(local_value_network)
        self._q_modules = without_greedy_head(local_value_network)
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss"]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        mixer_extra = [k for k in self.mixer_network.in_keys if k != keys.local_value]
        return [
            *self._net_in_keys(self.local_value_network),
            *mixer_extra,
            *(next_key(k) for k in mixer_extra),
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _mix(self, tensordict: TensorDictBase, local: Tensor, param_set: ParamSet) -> Tensor:
        keys = self.tensor_keys
        extra = [k for k in self.mixer_network.in_keys if k != keys.local_value]
        inputs = tensordict.select(*extra, strict=False)
        inputs.set(keys.local_value, local)
        return self._call_network("mixer_network", inputs, param_set).get(keys.global_value)

    def _local_values(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        out = self._call_network(
            "local_value_network",
            tensordict.select(*self.local_value_network.in_keys, strict=False),
            param_set,
            modules=self._q_modules,
        )
        return out.get(self.tensor_keys.action_value)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss`` on the mixed values.

        Args:
            tensordict: a batch ``[*B]`` with the agents' inputs (root and ``"next"``), the
                mixer's extra inputs (e.g. ``"state"``), the agents' actions and the global
                ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        values = self._local_values(tensordict, ParamSet.ONLINE)  # [*B, n_agents, n]
        chosen = gather_action_values(
            values, tensordict.get(keys.action), self.action_space, "QMixerLoss", keys.action
        )
        pred = self._mix(tensordict, chosen, ParamSet.ONLINE)
        with torch.no_grad():
            next_td = tensordict.get(NEXT)
            next_values = self._local_values(next_td, ParamSet.TARGET)
            mask = next_td.get(self._mask_key, None) if self._mask_key is not None else None
            best = masked_argmax(next_values, mask)
            next_chosen = next_values.gather(-1, best.unsqueeze(-1))
            next_value = self._mix(next_td, next_chosen, ParamSet.TARGET)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        if pred.shape != target.shape:
            raise ValueError(
                f"QMixerLoss: the mixed value has shape {tuple(pred.shape)} but the target "
                f"(from the global reward {keys.reward!r}) has shape {tuple(target.shape)}"
            )
        write_priority(tensordict, keys.priority, pred, target)
        loss = distance_loss(pred, target, self.loss_function)
        return TensorDict({"loss": reduce_loss(loss, self.reduction)}, batch_size=[])
