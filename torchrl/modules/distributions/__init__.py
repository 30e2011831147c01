"""Action distributions that work with tensordict's probabilistic modules and interaction types.

``Delta`` and ``NormalParamExtractor`` are tensordict's own classes, re-exported here so that
policies import every distribution from one place; ``OneHotCategorical`` subclasses tensordict's
with cheaper per-step sampling and scoring.
"""

from __future__ import annotations

from tensordict.nn import NormalParamExtractor
from tensordict.nn.distributions import Delta

from torchrl.modules.distributions.continuous import (
    IndependentNormal,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)
from torchrl.modules.distributions.discrete import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    OneHotOrdinal,
    Ordinal,
    ReparamGradientStrategy,
)

__all__ = [
    "Delta",
    "IndependentNormal",
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "NormalParamExtractor",
    "OneHotCategorical",
    "OneHotOrdinal",
    "Ordinal",
    "ReparamGradientStrategy",
    "TanhDelta",
    "TanhNormal",
    "TruncatedNormal",
]
