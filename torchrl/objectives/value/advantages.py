"""TorchRL's ``torchrl.objectives.value.advantages`` path; the estimators live in :mod:`torchrl.objectives.value.estimators`."""

from __future__ import annotations

from torchrl.objectives.value.estimators import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    VTrace,
)

__all__ = [
    "GAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
]
