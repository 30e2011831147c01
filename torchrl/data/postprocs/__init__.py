"""Batch post-processing: :class:`MultiStep` returns, :class:`DensifyReward`,
:func:`split_trajectories`."""

from __future__ import annotations

from torchrl.data.postprocs.postprocs import DensifyReward, MultiStep, split_trajectories

__all__ = ["DensifyReward", "MultiStep", "split_trajectories"]
