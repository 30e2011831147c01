"""TorchRL's ``torchrl.trainers.trainers`` path; the trainer and its hooks live in :mod:`torchrl.trainers`."""

from __future__ import annotations

from torchrl.trainers.evaluation import LogValidationReward, Recorder
from torchrl.trainers.hooks import (
    BatchSubSampler,
    ClearCudaCache,
    CountFramesLog,
    LogReward,
    LogScalar,
    OptimizerHook,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    TrainerHookBase,
    UpdateWeights,
)
from torchrl.trainers.hooks_extra import (
    LRSchedulerHook,
    TargetNetUpdaterHook,
    UTDRHook,
    ValueEstimatorHook,
)
from torchrl.trainers.trainer import Trainer

__all__ = [
    "LRSchedulerHook",
    "TargetNetUpdaterHook",
    "TrainerHookBase",
    "UTDRHook",
    "ValueEstimatorHook",
    "BatchSubSampler",
    "ClearCudaCache",
    "CountFramesLog",
    "LogReward",
    "LogScalar",
    "LogValidationReward",
    "OptimizerHook",
    "Recorder",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "Trainer",
    "UpdateWeights",
]
