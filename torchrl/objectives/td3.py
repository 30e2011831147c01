"""Twin delayed DDPG loss (Fujimoto et al., 2018)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import ACTION, DONE, NEXT, PRIORITY, REWARD, STATE_ACTION_VALUE, TERMINATED
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_bounds,
    check_action_shape,
    check_loss_function,
    check_reduction,
    ensemble_distance,
    reduce_loss,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, loss_output, next_key
from torchrl.objectives.utils import ValueEstimators

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["TD3Loss"]


class TD3Loss(LossModule):
    """TD3: clipped double-Q targets with target-policy smoothing.

    ``a' = clamp(pi_target(s') + clamp(N(0, policy_noise), -noise_clip, noise_clip), low, high)``,
    ``y = r + gamma * (1 - terminated) * min_i Q_target_i(s', a')``;
    ``loss_qvalue = sum_i d(Q_i(s, a), y)`` and ``loss_actor = -Q_1(s, pi(s))`` (critic
    parameters detached). The critics are an ensemble of ``num_qvalue_nets`` independently
    initialised copies of ``qvalue_network``, evaluated with :func:`torch.vmap`.

    Args:
        actor_network: a deterministic actor writing ``"action"``.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``.
        action_spec: the (bounded) action spec; gives the clamping bounds.
        bounds: ``(low, high)`` instead of ``action_spec``.
        num_qvalue_nets: number of critics.
        policy_noise: standard deviation of the target-policy noise.
        noise_clip: clip of that noise.
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        delay_actor: keep target actor parameters.
        delay_qvalue: keep target critic parameters.
        separate_losses: unused (the actor loss never updates the critics).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping (always done for
            two critics on CPU, where it is faster). Critics made of a plain ``MLP`` skip
            both: their members run stacked, one batched matmul per layer.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import Actor, ValueOperator, MLP
        >>> actor = Actor(nn.Linear(3, 1))
        >>> critic = ValueOperator(MLP(in_features=4, out_features=1, depth=1),
        ...                        in_keys=["observation", "action"])
        >>> loss = TD3Loss(actor, critic, bounds=(-1.0, 1.0))
        >>> loss.qvalue_network_params["module", "0", "weight"].shape[0]
        2
        >>> out = loss(observation=torch.randn(5, 3), action=torch.rand(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> len(out)
        6
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`TD3Loss`."""

        action: NestedKey = ACTION
        state_action_value: NestedKey = STATE_ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
    low: Tensor
    high: Tensor

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        action_spec: TensorSpec | None = None,
        bounds: tuple[float | Tensor, float | Tensor] | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__()
        action_key = (getattr(actor_network, "out_keys", None) or [ACTION])[0]
        low, high = action_bounds(
            type(self).__name__, action_spec, bounds, actor_network, action_key
        )
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=delay_qvalue,
        )
        self._tensor_keys.action = action_key
        self._adopt_out_key("state_action_value", qvalue_network)
        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise = float(policy_noise)
        self.noise_clip = float(noise_clip)
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.deactivate_vmap = deactivate_vmap
        self.out_keys = self._loss_out_keys()
        self._refresh_keys()

    def _loss_out_keys(self) -> list[str]:
        return [
            "loss_actor",
            "loss_qvalue",
            "pred_value",
            "state_action_value_actor",
            "next_state_value",
            "target_value",
        ]

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.actor_network),
            *self._net_in_keys(self.qvalue_network, with_next=False),
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _act(self, tensordict: TensorDictBase, param_set: ParamSet) -> TensorDictBase:
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        return self._call_network("actor_network", inputs, param_set)

    def _q(self, tensordict: TensorDictBase, param_set: ParamSet, minimum: bool = False) -> Tensor:
        """``[n_critics, *B, 1]`` action values (their minimum ``[*B, 1]`` with ``minimum``)."""
        key = self.tensor_keys.state_action_value
        (values,) = self._call_ensemble(
            "qvalue_network", tensordict, [key], param_set, minimum=minimum
        )
        return values

    def _smoothed_next_action(self, next_td: TensorDictBase) -> TensorDictBase:
        acted = self._act(next_td, ParamSet.TARGET)
        key = self.tensor_keys.action
        action = acted.get(key)
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip
        )
        low = self.low.to(action.dtype)
        high = self.high.to(action.dtype)
        acted.set(key, torch.clamp(action + noise, low, high))
        return acted

    def _actor_terms(self, tensordict: TensorDictBase, out: dict[str, Tensor]) -> Tensor:
        acted = self._act(tensordict, ParamSet.ONLINE)
        key = self.tensor_keys.action
        check_action_shape(type(self).__name__, key, tensordict.get(key), acted.get(key))
        # Only the first critic scores the actor: evaluate that member alone.
        value_key = self.tensor_keys.state_action_value
        q_actor = self._call_ensemble(
            "qvalue_network", acted, [value_key], ParamSet.DETACHED, first=1, minimum=True
        )[0]
        out["state_action_value_actor"] = q_actor.detach().mean()
        return -q_actor

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_actor``, ``loss_qvalue`` and value diagnostics.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the
                action and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict of loss terms and detached diagnostics.
        """
        self._check_inputs(tensordict)
        out: dict[str, Tensor] = {}
        loss_actor = self._actor_terms(tensordict, out)
        with torch.no_grad():
            next_acted = self._smoothed_next_action(tensordict.get(NEXT))
            next_value = self._q(next_acted, ParamSet.TARGET, minimum=True)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        pred = self._q(tensordict, ParamSet.ONLINE)  # [n, *B, 1]
        loss_qvalue = ensemble_distance(pred, target, self.loss_function, self.reduction)
        write_priority(tensordict, self.tensor_keys.priority, pred, target, ensemble=True)
        out["loss_actor"] = reduce_loss(loss_actor, self.reduction)
        out["loss_qvalue"] = loss_qvalue
        out["pred_value"] = pred.detach().mean()
        out["next_state_value"] = next_value.mean()
        out["target_value"] = target.mean()
        return loss_output(out)
