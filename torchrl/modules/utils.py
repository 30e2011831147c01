"""Positive mappings for scale parameters and the recurrent-module helpers, at TorchRL's
``torchrl.modules.utils`` path.

``get_primers_from_module`` and ``get_env_transforms_from_module`` are
:mod:`torchrl.modules.recurrent_utils`'s, re-exported here.

``mappings``, ``inv_softplus`` and ``biased_softplus`` are tensordict's own functions
(``tensordict.nn.utils``), re-exported so that code written against TorchRL's module path
imports them unchanged and both paths give the same objects:

- ``mappings(key)`` returns a map ``R -> R+`` by name: ``"softplus"``, ``"exp"``, ``"relu"``,
  ``"expln"``, ``"none"``, or ``"biased_softplus_<bias>[_<min_val>]"``;
- ``inv_softplus(y)`` is the ``x`` with ``softplus(x) == y``;
- ``biased_softplus(bias, min_val=0.01)`` is a module with ``f(0) == bias`` and
  ``f(x) > min_val``.

Examples:
    >>> import torch
    >>> from torchrl.modules.utils import biased_softplus, inv_softplus, mappings
    >>> mappings("exp")(torch.zeros(2))
    tensor([1., 1.])
    >>> round(float(torch.nn.functional.softplus(torch.tensor(inv_softplus(2.0)))), 4)
    2.0
    >>> biased_softplus(1.0)(torch.zeros(1))
    tensor([1.])
"""

from __future__ import annotations

from tensordict.nn.utils import biased_softplus, inv_softplus, mappings

from torchrl.modules.recurrent_utils import get_env_transforms_from_module, get_primers_from_module

__all__ = [
    "biased_softplus",
    "get_env_transforms_from_module",
    "get_primers_from_module",
    "inv_softplus",
    "mappings",
]
