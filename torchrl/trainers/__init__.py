"""Trainers: a training loop with hooks, checkpointing, and experiment loggers."""

from __future__ import annotations

from torchrl.record.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from torchrl.trainers.checkpoint import load_checkpoint, save_checkpoint
from torchrl.trainers.evaluation import EarlyStopping, LogValidationReward, Recorder
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
from torchrl.trainers.pbt import (
    PBT,
    ChoiceParam,
    ContinuousParam,
    IntegerParam,
    PBTMember,
    PBTMemberError,
    PBTRecord,
    PopulationBasedTraining,
    TrainerMember,
    set_loss_coefficient,
    set_optimizer_lr,
)
from torchrl.trainers.trainer import HOOK_POINTS, Trainer

__all__ = [
    "LRSchedulerHook",
    "TargetNetUpdaterHook",
    "TrainerHookBase",
    "UTDRHook",
    "ValueEstimatorHook",
    "HOOK_POINTS",
    "BatchSubSampler",
    "CSVLogger",
    "ClearCudaCache",
    "CountFramesLog",
    "EarlyStopping",
    "LogReward",
    "LogScalar",
    "LogValidationReward",
    "Logger",
    "MLFlowLogger",
    "OptimizerHook",
    "Recorder",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "TensorboardLogger",
    "Trainer",
    "UpdateWeights",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
    "load_checkpoint",
    "save_checkpoint",
    "PBT",
    "ChoiceParam",
    "ContinuousParam",
    "IntegerParam",
    "PBTMember",
    "PBTMemberError",
    "PBTRecord",
    "PopulationBasedTraining",
    "TrainerMember",
    "set_loss_coefficient",
    "set_optimizer_lr",
]
