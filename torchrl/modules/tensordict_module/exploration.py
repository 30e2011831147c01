"""TorchRL's ``torchrl.modules.tensordict_module.exploration`` path; the names live in :mod:`torchrl.modules.exploration`."""

from __future__ import annotations

from torchrl.modules.exploration import (
    AdditiveGaussianModule,
    AdditiveGaussianWrapper,
    EGreedyModule,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessModule,
    OrnsteinUhlenbeckProcessWrapper,
)
from torchrl.modules.models.consistent_dropout import ConsistentDropoutModule
from torchrl.modules.tensordict_module.exploration_spec import set_exploration_modules_spec_from_env

__all__ = [
    "ConsistentDropoutModule",
    "set_exploration_modules_spec_from_env",
    "AdditiveGaussianModule",
    "AdditiveGaussianWrapper",
    "EGreedyModule",
    "EGreedyWrapper",
    "OrnsteinUhlenbeckProcessModule",
    "OrnsteinUhlenbeckProcessWrapper",
]
