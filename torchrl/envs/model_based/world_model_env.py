"""``WorldModelEnv``: a learned model behind the env contract, with specs and start states."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs import TensorSpec
from torchrl.envs.model_based.common import ModelBasedEnvBase, ParamsLike, batched_spec

__all__ = ["StartStates", "WorldModelEnv"]

#: A start-state sampler: ``sampler(batch_size) -> TensorDict`` of batch ``batch_size``.
StartStates = Callable[[torch.Size], TensorDictBase] | TensorDictBase


class WorldModelEnv(ModelBasedEnvBase):
    """An env that steps a world model, with the specs it is given and optional start states.

    The world model reads the state (the observation entries, and any ``state_spec`` entry)
    and the action, and writes the next state under the observation keys (or under
    ``("next", key)``), the reward and optionally the done flags; see
    :class:`~torchrl.envs.model_based.ModelBasedEnvBase`. Specs describe one sub-env (no batch
    dims) and are expanded to ``batch_size``; :meth:`set_specs_from_env` copies a real env's
    instead. Resets start from the reset TensorDict when it holds the state, else from
    ``start_states``: a callable ``f(batch_size) -> TensorDict``, or a TensorDict of start
    states (any batch shape) from which each reset draws uniformly (seeded by ``set_seed``).
    Without ``start_states``, every reset must bring its states, and a rollout that goes on
    after a done raises.

    Args:
        world_model: the model (a ``TensorDictModule`` or any module from TensorDict to
            TensorDict).
        observation_spec: the state's spec, a ``Composite`` (a leaf is stored under
            ``"observation"``).
        action_spec: the action's spec (a leaf is stored under ``"action"``).
        reward_spec: the reward's spec (default: ``Unbounded`` of shape ``(1,)``).
        done_spec: the done flags' spec (default: boolean ``done``/``terminated``/``truncated``).
        state_spec: inputs of the model other than observations (default: none).
        start_states: a start-state sampler or a TensorDict of start states (see above).
        params: parameters to run the model with (see ``ModelBasedEnvBase``).
        buffers: buffers to run the model with (see ``ModelBasedEnvBase``).
        device: where the env's tensors live.
        batch_size: the batch size of a reset without input (default ``[]``).
        run_type_checks: check every output against the specs.
        allow_done_after_reset: do not raise when a start state is done.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data import Bounded, Composite, Unbounded
        >>> from torchrl.envs.model_based import WorldModelEnv
        >>> class Dynamics(torch.nn.Module):
        ...     def forward(self, obs, action):
        ...         nxt = obs + 0.1 * action
        ...         return nxt, -nxt.pow(2).sum(-1, keepdim=True)
        >>> model = TensorDictModule(Dynamics(), ["observation", "action"], ["observation", "reward"])
        >>> env = WorldModelEnv(
        ...     model,
        ...     observation_spec=Composite(observation=Unbounded(shape=(2,))),
        ...     action_spec=Bounded(-1.0, 1.0, shape=(2,)),
        ...     start_states=lambda shape: TensorDict(observation=torch.ones(*shape, 2), batch_size=shape),
        ...     batch_size=[4],
        ... )
        >>> env.rollout(5).batch_size
        torch.Size([4, 5])
    """

    def __init__(
        self,
        world_model: nn.Module,
        observation_spec: TensorSpec | None = None,
        action_spec: TensorSpec | None = None,
        reward_spec: TensorSpec | None = None,
        done_spec: TensorSpec | None = None,
        state_spec: TensorSpec | None = None,
        start_states: StartStates | None = None,
        *,
        params: ParamsLike | None = None,
        buffers: ParamsLike | None = None,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(
            world_model,
            params=params,
            buffers=buffers,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        batch, dev = self.batch_size, self.device
        if observation_spec is not None:
            self.observation_spec = batched_spec(observation_spec, batch, dev)
        if state_spec is not None:
            self.state_spec = batched_spec(state_spec, batch, dev)
        if action_spec is not None:
            self.action_spec = batched_spec(action_spec, batch, dev)
        if reward_spec is not None:
            self.reward_spec = batched_spec(reward_spec, batch, dev)
        if done_spec is not None:
            self.done_spec = batched_spec(done_spec, batch, dev)
        if start_states is not None and not (
            callable(start_states) or isinstance(start_states, TensorDictBase)
        ):
            raise TypeError(
                f"{type(self).__name__}: start_states must be a callable batch_size -> "
                f"TensorDict or a TensorDict of start states, got {type(start_states).__name__}"
            )
        if isinstance(start_states, TensorDictBase) and start_states.numel() == 0:
            raise ValueError(f"{type(self).__name__}: start_states holds no start state")
        self.start_states = start_states

    def sample_start_states(self, batch_size: torch.Size) -> TensorDictBase | None:
        """Start states from ``start_states`` (``None`` when the env has none).

        Args:
            batch_size: the batch size of the reset.

        Returns:
            A TensorDict of batch ``batch_size``, or ``None``.
        """
        source = self.start_states
        if source is None:
            return None
        if isinstance(source, TensorDictBase):
            pool = source.reshape(-1)
            index = torch.randint(
                pool.batch_size[0],
                (max(batch_size.numel(), 1),),
                generator=self.generator,
                device=self.generator.device,
            )
            return pool[index.to(pool.device) if pool.device is not None else index].reshape(
                batch_size
            )
        return source(batch_size)
