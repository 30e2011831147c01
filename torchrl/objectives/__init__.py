"""Objectives: losses, target-parameter updates and value estimators.

Every loss maps a TensorDict of data to a TensorDict of ``loss_*`` terms (sum them for the
backward pass) plus detached diagnostics. ``torchrl.objectives.value`` holds the value and
advantage estimates, as functions on tensors and as modules.
"""

from __future__ import annotations

from torchrl.modules.functional import symexp, symlog
from torchrl.modules.models.dreamer_v3_functional import (
    categorical_kl_terms,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
)
from torchrl.objectives._update_step import make_update_step
from torchrl.objectives.a2c import A2CLoss
from torchrl.objectives.act import ACTLoss
from torchrl.objectives.bc import BCLoss
from torchrl.objectives.common import (
    AUTO_LOSS_MASK_KEYS,
    RANDOM_MODULE_LIST,
    LossModule,
    ParamSet,
    add_random_module,
)
from torchrl.objectives.cql import CQLLoss, DiscreteCQLLoss
from torchrl.objectives.crossq import CrossQLoss
from torchrl.objectives.ddpg import DDPGLoss
from torchrl.objectives.decision_transformer import DTLoss, OnlineDTLoss
from torchrl.objectives.diffusion_bc import DiffusionBCLoss
from torchrl.objectives.dqn import DistributionalDQNLoss, DQNLoss
from torchrl.objectives.dreamer import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss
from torchrl.objectives.dreamer_v3 import (
    DreamerV3ActorLoss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
)
from torchrl.objectives.fql import FQLLoss
from torchrl.objectives.gail import GAILLoss
from torchrl.objectives.iql import DiscreteIQLLoss, IQLLoss
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss, MultiAgentGAE, QMixerLoss
from torchrl.objectives.pilco import ExponentialQuadraticCost
from torchrl.objectives.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from torchrl.objectives.redq import REDQLoss
from torchrl.objectives.reinforce import ReinforceLoss
from torchrl.objectives.rnd import RNDLoss
from torchrl.objectives.sac import DiscreteSACLoss, SACLoss
from torchrl.objectives.td3 import TD3Loss
from torchrl.objectives.td3_bc import TD3BCLoss
from torchrl.objectives.tdmpc2 import TdMpc2Loss
from torchrl.objectives.tqc import TQCLoss
from torchrl.objectives.utils import (
    HardUpdate,
    SoftUpdate,
    TargetNetUpdater,
    ValueEstimators,
    default_value_kwargs,
    distance_loss,
    group_optimizers,
    hold_out_net,
    hold_out_params,
    loss_terms,
    next_state_value,
    total_loss,
)
from torchrl.objectives.world_model_loss import WorldModelLoss

__all__ = [
    "ACTLoss",
    "CrossQLoss",
    "FQLLoss",
    "TdMpc2Loss",
    "DiffusionBCLoss",
    "GAILLoss",
    "RNDLoss",
    "TQCLoss",
    "categorical_kl_terms",
    "symexp",
    "symlog",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
    "AUTO_LOSS_MASK_KEYS",
    "IPPOLoss",
    "MAPPOLoss",
    "MultiAgentGAE",
    "RANDOM_MODULE_LIST",
    "add_random_module",
    "group_optimizers",
    "hold_out_params",
    "loss_terms",
    "next_state_value",
    "total_loss",
    "A2CLoss",
    "BCLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "DDPGLoss",
    "DQNLoss",
    "DTLoss",
    "DiscreteCQLLoss",
    "DiscreteIQLLoss",
    "DiscreteSACLoss",
    "DistributionalDQNLoss",
    "HardUpdate",
    "IQLLoss",
    "KLPENPPOLoss",
    "LossModule",
    "OnlineDTLoss",
    "PPOLoss",
    "ParamSet",
    "QMixerLoss",
    "REDQLoss",
    "ReinforceLoss",
    "SACLoss",
    "SoftUpdate",
    "TD3BCLoss",
    "TD3Loss",
    "TargetNetUpdater",
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "hold_out_net",
    "make_update_step",
]

# Issue 22: model-based losses.
__all__ += [
    "DreamerActorLoss",
    "DreamerModelLoss",
    "DreamerV3ActorLoss",
    "DreamerV3ModelLoss",
    "DreamerV3ValueLoss",
    "DreamerValueLoss",
    "ExponentialQuadraticCost",
    "WorldModelLoss",
]
