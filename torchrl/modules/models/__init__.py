"""Networks: MLP, ConvNet, noisy layers, multi-agent networks, mixers, transformers."""

from __future__ import annotations

from torchrl.modules.models.batchrenorm import BatchRenorm1d
from torchrl.modules.models.conv import ConvNet, DuelingCnnDQNet
from torchrl.modules.models.mixers import Mixer, QMixer, VDNMixer
from torchrl.modules.models.mlp import MLP
from torchrl.modules.models.multiagent import MultiAgentConvNet, MultiAgentMLP, MultiAgentNetBase
from torchrl.modules.models.noisy import NoisyLazyLinear, NoisyLinear, reset_noise
from torchrl.modules.models.transformer import (
    CausalTransformer,
    DecisionTransformer,
    DTActor,
    DTConfig,
)
from torchrl.modules.models.utils import AddStateIndependentNormalScale, SquashDims, Squeeze2dLayer

__all__ = [
    "MLP",
    "AddStateIndependentNormalScale",
    "BatchRenorm1d",
    "CausalTransformer",
    "ConvNet",
    "DTActor",
    "DTConfig",
    "DecisionTransformer",
    "DuelingCnnDQNet",
    "Mixer",
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "MultiAgentNetBase",
    "NoisyLazyLinear",
    "NoisyLinear",
    "QMixer",
    "SquashDims",
    "Squeeze2dLayer",
    "VDNMixer",
    "reset_noise",
]
