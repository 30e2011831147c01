"""Gives exploration modules built without an action spec the one of the env they will act in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from torchrl.modules._spec_utils import leaf_spec
from torchrl.modules.exploration import (
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
)

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase

__all__ = ["set_exploration_modules_spec_from_env"]

_EXPLORATION_MODULES = (AdditiveGaussianModule, EGreedyModule, OrnsteinUhlenbeckProcessModule)


def set_exploration_modules_spec_from_env(policy: nn.Module, env: EnvBase) -> None:
    """Sets the action spec of the exploration modules of ``policy`` that have none, from ``env``.

    Exploration modules (:class:`~torchrl.modules.AdditiveGaussianModule`,
    :class:`~torchrl.modules.OrnsteinUhlenbeckProcessModule`, ...) built with ``spec=None``
    add noise without projecting it. Once the env is known (e.g. in a collector), this gives each
    of them the env's spec of its ``action_key`` (without the env's batch dims), so that noisy
    actions are projected into the action bounds. Modules that already have a spec keep it.

    Args:
        policy: the policy; its submodules are searched.
        env: the env whose ``full_action_spec`` describes the actions.

    Raises:
        KeyError: a module's ``action_key`` is not an action of ``env``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.modules import AdditiveGaussianModule
        >>> env = PendulumEnv(batch_size=[2])
        >>> noise = AdditiveGaussianModule(spec=None, sigma_init=100.0)
        >>> policy = TensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"]), noise)
        >>> set_exploration_modules_spec_from_env(policy, env)
        >>> noise.spec.shape
        torch.Size([1])
        >>> td = policy(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
        >>> bool(td["action"].abs().max() <= 2.0)
        True
    """
    action_specs: Any = None
    for module in policy.modules():
        if not isinstance(module, _EXPLORATION_MODULES) or module.spec is not None:
            continue
        if action_specs is None:
            action_specs = getattr(env, "full_action_spec_unbatched", None)
            if action_specs is None:
                action_specs = env.full_action_spec
        key = module.action_key
        if key not in action_specs:
            raise KeyError(
                f"set_exploration_modules_spec_from_env: {type(module).__name__} acts on "
                f"{key!r}, which is not an action of the env "
                f"({list(action_specs.keys(True, True))})"
            )
        module.spec = leaf_spec(action_specs, key)
