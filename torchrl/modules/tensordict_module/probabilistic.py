"""TorchRL's ``torchrl.modules.tensordict_module.probabilistic`` path; the names live in :mod:`torchrl.modules.tensordict_module.safe`."""

from __future__ import annotations

from torchrl.modules.tensordict_module.safe import (
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
)

__all__ = [
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
]
