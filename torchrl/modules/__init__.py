"""Modules: networks, distributions, actors, exploration, recurrent policies and planners."""

from __future__ import annotations

from torchrl.envs.utils import RandomPolicy
from torchrl.modules.actors import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    ProbabilisticActor,
    TanhModule,
    ValueOperator,
    WorldModelWrapper,
)
from torchrl.modules.distributions import *  # noqa: F403
from torchrl.modules.distributions import __all__ as _distributions_all
from torchrl.modules.exploration import (
    AdditiveGaussianModule,
    AdditiveGaussianWrapper,
    EGreedyModule,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessModule,
    OrnsteinUhlenbeckProcessWrapper,
)
from torchrl.modules.gp_world_model import GPWorldModel
from torchrl.modules.gtrxl import GTrXL, GTrXLModule
from torchrl.modules.models import *  # noqa: F403
from torchrl.modules.models import __all__ as _models_all
from torchrl.modules.planners import CEMPlanner, MPCPlannerBase, MPPIPlanner
from torchrl.modules.qvalue import (
    DistributionalQValueActor,
    DistributionalQValueModule,
    QValueActor,
    QValueModule,
)
from torchrl.modules.rbf_controller import RBFController
from torchrl.modules.recurrent import (
    GRUModule,
    LSTMModule,
    recurrent_mode,
    set_recurrent_mode,
    window_episode_starts,
)
from torchrl.modules.recurrent_utils import get_env_transforms_from_module, get_primers_from_module
from torchrl.modules.shift import Shift
from torchrl.modules.tdmpc2 import (
    SimNorm,
    SimplicialNormalization,
    TdMpc2Planner,
    TdMpc2PolicyPrior,
    TdMpc2QEnsemble,
    TdMpc2WorldModel,
)
from torchrl.modules.tensordict_module.action_chunk import ActionChunkExecutor
from torchrl.modules.tensordict_module.diffusion import DiffusionActor
from torchrl.modules.tensordict_module.exploration_spec import set_exploration_modules_spec_from_env
from torchrl.modules.tensordict_module.multistep import MultiStepActorWrapper
from torchrl.modules.tensordict_module.safe import (
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    SafeSequential,
)
from torchrl.modules.transformer_module import (
    CausalTransformer,
    TransformerModule,
    canonicalize_rnn_subset,
    get_recurrent_matmul_precision,
    positions_from_is_init,
    segment_causal_mask_from_is_init,
    set_recurrent_matmul_precision,
)

__all__ = [
    *_models_all,
    *_distributions_all,
    "Actor",
    "AdditiveGaussianModule",
    "AdditiveGaussianWrapper",
    "CEMPlanner",
    "EGreedyModule",
    "EGreedyWrapper",
    "GRUModule",
    "GTrXL",
    "GTrXLModule",
    "LSTMModule",
    "MPCPlannerBase",
    "MPPIPlanner",
    "OrnsteinUhlenbeckProcessModule",
    "OrnsteinUhlenbeckProcessWrapper",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "RandomPolicy",
    "TanhModule",
    "ValueOperator",
    "WorldModelWrapper",
    "GPWorldModel",
    "RBFController",
    "SimNorm",
    "SimplicialNormalization",
    "TdMpc2Planner",
    "TdMpc2PolicyPrior",
    "TdMpc2QEnsemble",
    "TdMpc2WorldModel",
    "recurrent_mode",
    "set_recurrent_mode",
    "window_episode_starts",
    "ActionChunkExecutor",
    "MultiStepActorWrapper",
    "Shift",
    "get_env_transforms_from_module",
    "get_primers_from_module",
    "DiffusionActor",
    "CausalTransformer",
    "SafeModule",
    "TransformerModule",
    "canonicalize_rnn_subset",
    "get_recurrent_matmul_precision",
    "positions_from_is_init",
    "segment_causal_mask_from_is_init",
    "set_recurrent_matmul_precision",
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
    "SafeSequential",
    "set_exploration_modules_spec_from_env",
]
