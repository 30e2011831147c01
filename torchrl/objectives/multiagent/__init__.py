"""Multi-agent losses."""

from __future__ import annotations

from torchrl.objectives.multiagent.mappo import IPPOLoss, MAPPOLoss
from torchrl.objectives.multiagent.qmixer import QMixerLoss
from torchrl.objectives.value.multiagent import MultiAgentGAE

__all__ = ["IPPOLoss", "MAPPOLoss", "MultiAgentGAE", "QMixerLoss"]
