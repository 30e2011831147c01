"""Multi-agent PPO: ``MAPPOLoss`` (centralised critic) and ``IPPOLoss`` (one critic per agent).

Both are :class:`~torchrl.objectives.ClipPPOLoss` with multi-agent defaults: advantages come
from :class:`~torchrl.objectives.multiagent.MultiAgentGAE` (team rewards and per-env episode
ends broadcast over the agent dim), advantages are standardised over every dim but the agents'
(``normalize_advantage_exclude_dims=(-2,)``), and a ``value_norm`` may scale the critic's
targets (Yu et al. 2022 found it important on SMAC). The two differ only in the critic the user
builds: MAPPO's sees the whole team (e.g. ``MultiAgentMLP(centralized=True)``), IPPO's each
agent's own observation (``centralized=False``; de Witt et al. 2020).
"""

from __future__ import annotations

from typing import Any

from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase

from torchrl.objectives.ppo import ClipPPOLoss
from torchrl.objectives.utils import ValueEstimators
from torchrl.objectives.value.estimators import GAE, ValueEstimatorBase
from torchrl.objectives.value.multiagent import MultiAgentGAE

__all__ = ["IPPOLoss", "MAPPOLoss"]


class MAPPOLoss(ClipPPOLoss):
    """Multi-agent PPO with a centralised critic (Yu et al. 2022).

    Point the keys at the agents' group with :meth:`set_keys` (e.g.
    ``action=("agents", "action")``, ``reward=("agents", "reward")``, ``value=("agents",
    "state_value")``, ``advantage=("agents", "advantage")``); the value estimator follows.

    Args:
        actor_network: the per-agent policy (a probabilistic actor writing
            ``[*B, n_agents, action_dim]`` actions).
        critic_network: the centralised value network, writing one value per agent.
        entropy_coeff: the entropy bonus's weight (default 0.01).
        normalize_advantage: standardise the advantage (default ``True``).
        normalize_advantage_exclude_dims: dims kept out of that standardisation (default
            ``(-2,)``: the agent dim of ``[*B, n_agents, 1]`` advantages).
        value_norm: a :class:`~torchrl.modules.ValueNorm` for the critic's targets.
        **kwargs: the other keywords of :class:`~torchrl.objectives.ClipPPOLoss`.

    Examples:
        >>> import torch
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
        >>> from torchrl.objectives.multiagent import MAPPOLoss, MultiAgentGAE
        >>> net = nn.Sequential(
        ...     MultiAgentMLP(3, 4, n_agents=2, centralized=False, share_params=True),
        ...     NormalParamExtractor(),
        ... )
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, [("agents", "obs")], [("agents", "loc"), ("agents", "scale")]),
        ...     in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
        ...     out_keys=[("agents", "action")],
        ...     distribution_class=TanhNormal,
        ...     return_log_prob=True,
        ... )
        >>> critic = TensorDictModule(
        ...     MultiAgentMLP(3, 1, n_agents=2, centralized=True, share_params=True),
        ...     [("agents", "obs")],
        ...     [("agents", "state_value")],
        ... )
        >>> loss = MAPPOLoss(actor, critic)
        >>> isinstance(loss.value_estimator, MultiAgentGAE)
        True
    """

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential,
        critic_network: TensorDictModuleBase | None = None,
        *,
        entropy_coeff: float = 0.01,
        normalize_advantage: bool = True,
        normalize_advantage_exclude_dims: tuple[int, ...] = (-2,),
        value_norm: Any = None,
        **kwargs: Any,
    ) -> None:
        if "entropy_coef" not in kwargs:  # TorchRL's older spelling wins when given
            kwargs["entropy_coeff"] = entropy_coeff
        super().__init__(
            actor_network,
            critic_network,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            value_norm=value_norm,
            **kwargs,
        )

    def _estimator_class(self, value_type: ValueEstimators) -> type[ValueEstimatorBase]:
        cls = super()._estimator_class(value_type)
        # GAE broadcast over the agents; the other estimators are used as they are.
        return MultiAgentGAE if cls is GAE else cls


class IPPOLoss(MAPPOLoss):
    """Independent PPO (de Witt et al. 2020): :class:`MAPPOLoss` with a per-agent critic.

    Identical to :class:`MAPPOLoss` except in intent: build the critic so that each agent's
    value reads only its own observation (``MultiAgentMLP(centralized=False)``). A separate
    class so that a script says which algorithm it runs.

    Args:
        actor_network: the per-agent policy.
        critic_network: the per-agent (decentralised) value network.
        **kwargs: the keywords of :class:`MAPPOLoss`.

    Examples:
        >>> from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss
        >>> issubclass(IPPOLoss, MAPPOLoss)
        True
    """
