"""The ``torchrl.objectives.multiagent.gae`` path; :class:`MultiAgentGAE` lives with the other
estimators in :mod:`torchrl.objectives.value.multiagent`."""

from __future__ import annotations

from torchrl.objectives.value.multiagent import MultiAgentGAE

__all__ = ["MultiAgentGAE"]
