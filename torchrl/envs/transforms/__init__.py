"""Env transforms: rewrite what comes out of an env (and the actions going in), with their specs.

A transform works in a :class:`TransformedEnv`, as a module on a TensorDict, and in a replay
buffer. One file per family: ``base`` (``Transform``, ``Compose``), ``env`` (``TransformedEnv``),
``tracking``, ``reward``, ``dtype``, ``norm``, ``image``, ``keys``, ``frames``, ``actions``,
``checks`` (sanity checks), ``unary`` (user functions), ``rb`` (replay-buffer-only transforms),
``policy`` (policy switch, skips, action sequences, module runs, belief adapters), ``macro``
(macro actions), ``norm_v2`` (``VecNormV2``), ``rnd`` (``RNDTransform``, ``RunningMeanStd``),
``exploration`` (``gSDENoise``), ``vec_gym`` (``VecGymEnvTransform``), ``functional``
(``cat_frames``),
``lifecycle`` (timing, auto-reset, termination, lives, random truncation, batch size), ``device``
(device casts, pinned memory), ``shapes`` (``ExpandAs``, ``FlattenAction``), ``hashing``
(``Hash``), ``delta`` (``NextObservationDelta``).
"""

from __future__ import annotations

from torchrl.envs.transforms.actions import (
    ActionDiscretizer,
    ActionMask,
    ActionScaling,
    ClipTransform,
    DiscreteActionProjection,
)
from torchrl.envs.transforms.atari import MaxPoolFrameSkip
from torchrl.envs.transforms.base import Compose, ObservationTransform, Transform
from torchrl.envs.transforms.checks import FiniteTensorDictCheck
from torchrl.envs.transforms.delta import NextObservationDelta
from torchrl.envs.transforms.device import DeviceCastTransform, PinMemoryTransform
from torchrl.envs.transforms.dtype import DoubleToFloat, DTypeCastTransform
from torchrl.envs.transforms.env import TransformedEnv
from torchrl.envs.transforms.exploration import gSDENoise
from torchrl.envs.transforms.frames import CatFrames, FrameSkipTransform, NoopResetEnv, TimeMaxPool
from torchrl.envs.transforms.hashing import Hash
from torchrl.envs.transforms.image import CenterCrop, Crop, GrayScale, Resize, ToTensorImage
from torchrl.envs.transforms.keys import (
    CatTensors,
    ExcludeTransform,
    FlattenObservation,
    PermuteTransform,
    RemoveEmptySpecs,
    RenameTransform,
    SelectTransform,
    SqueezeTransform,
    Stack,
    UnsqueezeTransform,
)
from torchrl.envs.transforms.lifecycle import (
    AutoResetEnv,
    AutoResetTransform,
    BatchSizeTransform,
    EndOfLifeTransform,
    RandomTruncationTransform,
    TerminateTransform,
    Timer,
)
from torchrl.envs.transforms.macro import (
    MacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    TargetMacroAction,
)
from torchrl.envs.transforms.next_state import NextStateReconstructor
from torchrl.envs.transforms.norm import ObservationNorm, VecNorm
from torchrl.envs.transforms.norm_v2 import VecNormV2
from torchrl.envs.transforms.policy import (
    ConditionalPolicySwitch,
    ConditionalSkip,
    MeanActionSelector,
    ModuleTransform,
    MultiAction,
)
from torchrl.envs.transforms.policy_age import PolicyAgeFilter
from torchrl.envs.transforms.pretrained import (
    R3MTransform,
    VC1Transform,
    VIPRewardTransform,
    VIPTransform,
)
from torchrl.envs.transforms.rb import (
    BurnInTransform,
    MultiStepTransform,
    RandomCropTensorDict,
    Reward2GoTransform,
)
from torchrl.envs.transforms.reward import (
    BinarizeReward,
    LineariseRewards,
    RewardClipping,
    RewardScaling,
    SignTransform,
    SuccessReward,
    TargetReturn,
)
from torchrl.envs.transforms.rnd import RNDTransform, RunningMeanStd
from torchrl.envs.transforms.shapes import ExpandAs, FlattenAction
from torchrl.envs.transforms.tokenizer import Tokenizer
from torchrl.envs.transforms.tracking import (
    InitTracker,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    TrajCounter,
)
from torchrl.envs.transforms.unary import UnaryTransform
from torchrl.envs.transforms.ur_primitives import (
    RobotMacroAction,
    URScriptPrimitive,
    URScriptPrimitiveTransform,
)
from torchrl.envs.transforms.vec_gym import VecGymEnvTransform

__all__ = [
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "DeviceCastTransform",
    "EndOfLifeTransform",
    "ExpandAs",
    "FlattenAction",
    "Hash",
    "NextObservationDelta",
    "PinMemoryTransform",
    "RandomTruncationTransform",
    "TerminateTransform",
    "Timer",
    "ActionDiscretizer",
    "ActionMask",
    "ActionScaling",
    "BinarizeReward",
    "BurnInTransform",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "Crop",
    "DTypeCastTransform",
    "DiscreteActionProjection",
    "DoubleToFloat",
    "ExcludeTransform",
    "FiniteTensorDictCheck",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "InitTracker",
    "LineariseRewards",
    "NoopResetEnv",
    "ObservationNorm",
    "ObservationTransform",
    "PermuteTransform",
    "RandomCropTensorDict",
    "RemoveEmptySpecs",
    "RenameTransform",
    "Resize",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SignTransform",
    "SqueezeTransform",
    "Stack",
    "StepCounter",
    "SuccessReward",
    "TargetReturn",
    "TensorDictPrimer",
    "MaxPoolFrameSkip",
    "TimeMaxPool",
    "ToTensorImage",
    "TrajCounter",
    "Transform",
    "TransformedEnv",
    "UnaryTransform",
    "UnsqueezeTransform",
    "VecNorm",
]

# Policy, macro-action, normalization (v2), RND, gSDE and vector-gym transforms.
__all__ += [
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "MeanActionSelector",
    "ModuleTransform",
    "MultiAction",
    "RNDTransform",
    "RunningMeanStd",
    "TargetMacroAction",
    "VecGymEnvTransform",
    "VecNormV2",
    "gSDENoise",
]

# Sampled-transition rebuild and tokenization (issue 17).
__all__ += ["NextStateReconstructor", "Tokenizer"]
__all__ += ["MultiStepTransform"]

# Pretrained visual embeddings and URScript-style robot primitives (issue 17).
__all__ += [
    "R3MTransform",
    "RobotMacroAction",
    "URScriptPrimitive",
    "URScriptPrimitiveTransform",
    "VC1Transform",
    "VIPRewardTransform",
    "VIPTransform",
]

# Policy lag of asynchronously collected data (issue 19).
__all__ += ["PolicyAgeFilter"]
