"""Multi-agent losses."""

from torchrl.objectives.multiagent.gae import MultiAgentGAE
from torchrl.objectives.multiagent.qmixer import QMixerLoss

__all__ = ["MultiAgentGAE", "QMixerLoss"]
