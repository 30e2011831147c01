"""Multi-agent losses."""

from torchrl.objectives.multiagent.qmixer import QMixerLoss

__all__ = ["QMixerLoss"]
