"""Monte Carlo Tree Search: child scores (UCB, PUCT, UCB1-Tuned, EXP3) and search policies."""

from __future__ import annotations

from torchrl.modules.mcts.policies import (
    AlphaGoPolicy,
    AlphaStarPolicy,
    MCTSPolicy,
    MCTSPolicyBase,
    MuZeroPolicy,
)
from torchrl.modules.mcts.scores import (
    EXP3Score,
    MCTSScore,
    MCTSScores,
    PUCTScore,
    UCB1TunedScore,
    UCBScore,
)

__all__ = [
    "AlphaGoPolicy",
    "AlphaStarPolicy",
    "EXP3Score",
    "MCTSPolicy",
    "MCTSPolicyBase",
    "MCTSScore",
    "MCTSScores",
    "MuZeroPolicy",
    "PUCTScore",
    "UCB1TunedScore",
    "UCBScore",
]
