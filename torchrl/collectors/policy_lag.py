"""Policy lag: how many weight updates behind the learner the collected data is.

An asynchronous collector tags every step with the version of the weights that produced it
(``"policy_version"``, an ``int64`` entry). The lag of a step is ``current_version - version``:
0 for data collected with the learner's current weights, 1 for data one update old, and so on.
:func:`policy_lag_stats` summarises it over a batch; to drop data that is too old, see
:class:`~torchrl.envs.transforms.PolicyAgeFilter`.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from torchrl._keys import POLICY_VERSION
from torchrl._types import NestedKey
from torchrl.envs.transforms.policy_age import as_version, batch_versions

__all__ = ["policy_lag_stats"]


def policy_lag_stats(
    batch: TensorDictBase | torch.Tensor,
    current_version: int | torch.Tensor,
    version_key: NestedKey = POLICY_VERSION,
) -> dict[str, float]:
    """The minimum, mean and maximum policy lag of the steps in ``batch``.

    Every step counts once: the mean is over steps (frames), not over rows. The lag is
    ``current_version - version`` as it is; a negative lag (data tagged with a version newer
    than ``current_version``) is reported, not hidden, since it means ``current_version`` is
    out of date.

    Args:
        batch: collected data ``[*B]`` (e.g. ``[rows, T]``) holding ``version_key``, or the
            version tensor itself.
        current_version: the learner's policy version (an int or a one-element tensor).
        version_key: the entry holding the versions. Defaults to ``"policy_version"``.

    Returns:
        ``{"min": ..., "mean": ..., "max": ...}``, as Python floats.

    Raises:
        KeyError: ``batch`` has no ``version_key`` entry.
        ValueError: ``batch`` holds no step, or ``current_version`` is not one integer.

    Examples:
        >>> from tensordict import TensorDict
        >>> versions = torch.tensor([[3, 3, 4], [1, 2, 2]])
        >>> batch = TensorDict(policy_version=versions, batch_size=[2, 3])
        >>> policy_lag_stats(batch, current_version=4)
        {'min': 0.0, 'mean': 1.5, 'max': 3.0}
    """
    versions = batch_versions(batch, version_key, "policy_lag_stats")
    current = as_version(current_version, "current_version", "policy_lag_stats")
    if versions.numel() == 0:
        raise ValueError(
            "policy_lag_stats: the batch holds no step; the lag of nothing is undefined"
        )
    lag = current - versions
    return {
        "min": float(lag.min()),
        "mean": float(lag.double().mean()),
        "max": float(lag.max()),
    }
