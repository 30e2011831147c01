"""Collector utilities: :func:`split_trajectories` (defined in :mod:`torchrl.data.postprocs`)."""

from __future__ import annotations

from torchrl.data.postprocs import split_trajectories

__all__ = ["split_trajectories"]
