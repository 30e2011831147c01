"""TorchRL's ``torchrl.modules.tensordict_module`` path; the modules live in :mod:`torchrl.modules`."""

from __future__ import annotations

from torchrl.modules import RandomPolicy
from torchrl.modules.models.consistent_dropout import ConsistentDropoutModule
from torchrl.modules.tensordict_module.action_chunk import ActionChunkExecutor
from torchrl.modules.tensordict_module.actors import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    DistributionalQValueActor,
    DistributionalQValueModule,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    TanhModule,
    ValueOperator,
)
from torchrl.modules.tensordict_module.diffusion import DiffusionActor
from torchrl.modules.tensordict_module.exploration import (
    AdditiveGaussianModule,
    AdditiveGaussianWrapper,
    EGreedyModule,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessModule,
    OrnsteinUhlenbeckProcessWrapper,
)
from torchrl.modules.tensordict_module.exploration_spec import set_exploration_modules_spec_from_env
from torchrl.modules.tensordict_module.multistep import MultiStepActorWrapper
from torchrl.modules.tensordict_module.rnn import (
    GRUModule,
    LSTMModule,
    recurrent_mode,
    set_recurrent_mode,
)
from torchrl.modules.tensordict_module.safe import (
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    SafeSequential,
)
from torchrl.modules.tensordict_module.world_models import WorldModelWrapper

__all__ = [
    "RandomPolicy",
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "AdditiveGaussianModule",
    "AdditiveGaussianWrapper",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "EGreedyModule",
    "EGreedyWrapper",
    "GRUModule",
    "LSTMModule",
    "OrnsteinUhlenbeckProcessModule",
    "OrnsteinUhlenbeckProcessWrapper",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "TanhModule",
    "ValueOperator",
    "WorldModelWrapper",
    "recurrent_mode",
    "set_recurrent_mode",
    "ActionChunkExecutor",
    "MultiStepActorWrapper",
    "ConsistentDropoutModule",
    "DiffusionActor",
    "SafeModule",
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
    "SafeSequential",
    "set_exploration_modules_spec_from_env",
]
