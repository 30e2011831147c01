"""Batch post-processing for collectors: :class:`MultiStep` returns and :func:`split_trajectories`."""

from __future__ import annotations

from torchrl.data.postprocs.postprocs import MultiStep, split_trajectories

__all__ = ["MultiStep", "split_trajectories"]
