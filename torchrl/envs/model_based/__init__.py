"""Model-based envs: a learned world model behind the env contract (issue 22).

- :class:`ModelBasedEnvBase`: the base; its step runs the world model, differentiably.
- :class:`WorldModelEnv`: a world model with given specs and optional start states.
- :class:`ImaginedEnv`: rollouts started from states sampled from a replay buffer.
- :class:`DreamerEnv` and :class:`DreamerDecoder`: Dreamer's latent env and pixel decoder.
"""

from __future__ import annotations

from torchrl.envs.model_based.common import ModelBasedEnvBase
from torchrl.envs.model_based.dreamer import DreamerDecoder, DreamerEnv
from torchrl.envs.model_based.imagined import ImaginedEnv
from torchrl.envs.model_based.world_model_env import WorldModelEnv

__all__ = ["DreamerDecoder", "DreamerEnv", "ImaginedEnv", "ModelBasedEnvBase", "WorldModelEnv"]
