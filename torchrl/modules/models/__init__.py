"""Networks: MLP, ConvNet, noisy layers, multi-agent networks, mixers, transformers."""

from __future__ import annotations

from torchrl.modules.models.act import ACTModel
from torchrl.modules.models.batchrenorm import BatchRenorm1d
from torchrl.modules.models.consistent_dropout import ConsistentDropout, ConsistentDropoutModule
from torchrl.modules.models.conv import ConvNet, DuelingCnnDQNet
from torchrl.modules.models.conv3d import Conv3dNet
from torchrl.modules.models.cross_group import (
    CrossCriticGroupSpec,
    CrossGroupCritic,
    CrossGroupCriticSpec,
)
from torchrl.modules.models.ddpg import DdpgCnnActor, DdpgCnnQNet, DdpgMlpActor, DdpgMlpQNet
from torchrl.modules.models.distributional import DistributionalDQNnet
from torchrl.modules.models.dreamer_v3 import (
    DreamerV3BlockGRU,
    DreamerV3BlockGRUCell,
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    RSSMPosteriorV3,
    RSSMPriorV3,
    RSSMRolloutV3,
    RSSMStateEstimatorV3,
    SymExpTwoHot,
    SymExpTwoHotDistribution,
)
from torchrl.modules.models.flow import FlowMatchingModel, OneStepModel
from torchrl.modules.models.mixers import Mixer, QMixer, VDNMixer
from torchrl.modules.models.mlp import MLP
from torchrl.modules.models.model_based import (
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
    WorldModel,
)
from torchrl.modules.models.multiagent import MultiAgentConvNet, MultiAgentMLP, MultiAgentNetBase
from torchrl.modules.models.noisy import NoisyLazyLinear, NoisyLinear, reset_noise
from torchrl.modules.models.online_dt import OnlineDTActor
from torchrl.modules.models.transformer import (
    CausalTransformer as CausalTransformer,  # old name of GPTBackbone, kept out of __all__
)
from torchrl.modules.models.transformer import (
    DecisionTransformer,
    DTActor,
    DTConfig,
    GPTBackbone,
)
from torchrl.modules.models.utils import AddStateIndependentNormalScale, SquashDims, Squeeze2dLayer
from torchrl.modules.models.value_norm import (
    ComposeValueTransform,
    DecodedValueOperator,
    IdentityValueTransform,
    PercentileValueNorm,
    PopArtValueNorm,
    RunningValueNorm,
    SignedHyperbolicValueTransform,
    SymLogValueTransform,
    ValueNorm,
    ValueTransform,
    decode_value,
    encode_value,
)

__all__ = [
    "MLP",
    "AddStateIndependentNormalScale",
    "BatchRenorm1d",
    "GPTBackbone",
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

# Issue 18: DDPG and distributional nets, 3-d convolutions, online DT, cross-group critics,
# consistent dropout, value normalisation and value transforms.
__all__ += [
    "ACTModel",
    "ComposeValueTransform",
    "ConsistentDropout",
    "ConsistentDropoutModule",
    "Conv3dNet",
    "CrossCriticGroupSpec",
    "CrossGroupCritic",
    "CrossGroupCriticSpec",
    "DdpgCnnActor",
    "DdpgCnnQNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "DecodedValueOperator",
    "DistributionalDQNnet",
    "FlowMatchingModel",
    "OneStepModel",
    "IdentityValueTransform",
    "OnlineDTActor",
    "PercentileValueNorm",
    "PopArtValueNorm",
    "RunningValueNorm",
    "SignedHyperbolicValueTransform",
    "SymLogValueTransform",
    "ValueNorm",
    "ValueTransform",
    "decode_value",
    "encode_value",
]

# Issue 22: Dreamer v1 and v3 world-model networks.
__all__ += [
    "DreamerActor",
    "DreamerV3BlockGRU",
    "DreamerV3BlockGRUCell",
    "DreamerV3ImageDecoder",
    "DreamerV3ImageEncoder",
    "DreamerV3MLP",
    "ObsDecoder",
    "ObsEncoder",
    "RSSMPosterior",
    "RSSMPosteriorV3",
    "RSSMPrior",
    "RSSMPriorV3",
    "RSSMRollout",
    "RSSMRolloutV3",
    "RSSMStateEstimatorV3",
    "SymExpTwoHot",
    "SymExpTwoHotDistribution",
    "WorldModel",
]
