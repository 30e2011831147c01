"""Tensor specs: what shape, dtype, device and values a tensor (or a TensorDict) may have.

Leaf specs (``Unbounded``, ``Bounded``, ``Categorical``, ``OneHot``, ``MultiCategorical``,
``MultiOneHot``, ``Binary``, ``NonTensor``) describe one entry; ``Composite`` describes a
TensorDict; ``torch.stack`` / ``stack_specs`` stack specs, lazily (``Stacked``,
``StackedComposite``) when they differ. The TorchRL paper's names are permanent aliases.
"""

from __future__ import annotations

from torchrl.data.specs.base import (
    BinaryBox,
    BoxList,
    CategoricalBox,
    ContinuousBox,
    TensorSpec,
)
from torchrl.data.specs.composite import Composite
from torchrl.data.specs.continuous import Bounded, Unbounded, UnboundedDiscrete
from torchrl.data.specs.discrete import Binary, Categorical, OneHot
from torchrl.data.specs.multi import MultiCategorical, MultiOneHot
from torchrl.data.specs.nontensor import NonTensor
from torchrl.data.specs.stacked import Stacked, StackedComposite, stack_specs

# Current TorchRL names that are plain synonyms here.
UnboundedContinuous = Unbounded
BoundedContinuous = Bounded

# Paper-era names: permanent aliases, no warnings.
CompositeSpec = Composite
UnboundedContinuousTensorSpec = Unbounded
UnboundedDiscreteTensorSpec = UnboundedDiscrete
BoundedTensorSpec = Bounded
OneHotDiscreteTensorSpec = OneHot
DiscreteTensorSpec = Categorical
MultiOneHotDiscreteTensorSpec = MultiOneHot
MultiDiscreteTensorSpec = MultiCategorical
BinaryDiscreteTensorSpec = Binary
NonTensorSpec = NonTensor
LazyStackedTensorSpec = Stacked
LazyStackedCompositeSpec = StackedComposite

__all__ = [
    "TensorSpec",
    "Unbounded",
    "UnboundedDiscrete",
    "UnboundedContinuous",
    "Bounded",
    "BoundedContinuous",
    "Categorical",
    "OneHot",
    "MultiCategorical",
    "MultiOneHot",
    "Binary",
    "NonTensor",
    "Composite",
    "Stacked",
    "StackedComposite",
    "stack_specs",
    "ContinuousBox",
    "CategoricalBox",
    "BinaryBox",
    "BoxList",
    "CompositeSpec",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscreteTensorSpec",
    "BoundedTensorSpec",
    "OneHotDiscreteTensorSpec",
    "DiscreteTensorSpec",
    "MultiOneHotDiscreteTensorSpec",
    "MultiDiscreteTensorSpec",
    "BinaryDiscreteTensorSpec",
    "NonTensorSpec",
    "LazyStackedTensorSpec",
    "LazyStackedCompositeSpec",
]
