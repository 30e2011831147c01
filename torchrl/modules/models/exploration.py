"""TorchRL's ``torchrl.modules.models.exploration`` path; the names live in :mod:`torchrl.modules.models.consistent_dropout`."""

from __future__ import annotations

from torchrl.modules.models.consistent_dropout import (
    ConsistentDropout,
    ConsistentDropoutModule,
)
from torchrl.modules.models.noisy import (
    NoisyLazyLinear,
    NoisyLinear,
    reset_noise,
)

__all__ = [
    "ConsistentDropout",
    "ConsistentDropoutModule",
    "NoisyLazyLinear",
    "NoisyLinear",
    "reset_noise",
]
