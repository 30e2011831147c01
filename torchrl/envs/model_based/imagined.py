"""``ImaginedEnv``: imagined rollouts that start from states sampled from a replay buffer.

Dreamer and MBPO train on short rollouts of a learned model started from many real (or
encoded) states at once. Here every reset draws its start states from a replay buffer (any
object with ``sample(n) -> TensorDict``, such as our ``ReplayBuffer``), so that
``env.rollout(horizon, policy)`` gives a batch of imagined trajectories, differentiable
through the model and the policy when gradients are on.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs import TensorSpec
from torchrl.envs.common import EnvBase
from torchrl.envs.model_based.common import ParamsLike
from torchrl.envs.model_based.world_model_env import WorldModelEnv

__all__ = ["ImaginedEnv", "SamplesStates"]


class SamplesStates(Protocol):
    """What :class:`ImaginedEnv` needs from a replay buffer: ``sample(batch_size)``."""

    def sample(self, batch_size: int | None = None) -> Any: ...


class ImaginedEnv(WorldModelEnv):
    """A :class:`WorldModelEnv` whose resets draw the start states from a replay buffer.

    A reset of ``n`` sub-envs takes ``replay_buffer.sample(n)`` and reshapes it to the reset's
    batch; a reset without input on an env of batch size ``[]`` takes
    ``replay_buffer.sample()`` (the buffer's own batch size) flattened to ``[M]``, so that the
    rollout batch follows the buffer. Only the observation and state entries of the samples are
    kept. Partial resets (``rollout(..., break_when_any_done=False)``, collectors) draw new
    states for the finished sub-envs. States passed in the reset TensorDict are used as they
    are, as in ``WorldModelEnv``.

    Args:
        world_model: the model stepping the states (see ``WorldModelEnv``).
        replay_buffer: where start states come from: anything with ``sample(n) -> TensorDict``.
        base_env: a real env whose specs are copied (``set_specs_from_env``); or give the specs.
        observation_spec: the state's spec, one sub-env (see ``WorldModelEnv``).
        action_spec: the action's spec, one sub-env.
        reward_spec: the reward's spec (default ``Unbounded((1,))``).
        done_spec: the done flags' spec (default boolean flags).
        state_spec: extra model inputs (default none).
        params: parameters to run the model with (see ``ModelBasedEnvBase``).
        buffers: buffers to run the model with (see ``ModelBasedEnvBase``).
        device: where the env's tensors live.
        batch_size: the batch size of a reset without input (``[]``: the buffer's batch size).
        run_type_checks: check every output against the specs.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer, Unbounded, Composite
        >>> from torchrl.envs.model_based import ImaginedEnv
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=32)
        >>> _ = rb.extend(TensorDict(observation=torch.randn(100, 3), batch_size=[100]))
        >>> class Dynamics(torch.nn.Module):
        ...     def forward(self, obs, action):
        ...         return obs + action, obs.sum(-1, keepdim=True)
        >>> model = TensorDictModule(Dynamics(), ["observation", "action"], ["observation", "reward"])
        >>> env = ImaginedEnv(
        ...     model, rb,
        ...     observation_spec=Composite(observation=Unbounded(shape=(3,))),
        ...     action_spec=Unbounded(shape=(3,)),
        ... )
        >>> env.rollout(15).batch_size  # 32 starts from the buffer, 15 imagined steps
        torch.Size([32, 15])
    """

    def __init__(
        self,
        world_model: nn.Module,
        replay_buffer: SamplesStates,
        base_env: EnvBase | None = None,
        *,
        observation_spec: TensorSpec | None = None,
        action_spec: TensorSpec | None = None,
        reward_spec: TensorSpec | None = None,
        done_spec: TensorSpec | None = None,
        state_spec: TensorSpec | None = None,
        params: ParamsLike | None = None,
        buffers: ParamsLike | None = None,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        run_type_checks: bool = False,
        validate_actions: bool = True,
    ) -> None:
        if not callable(getattr(replay_buffer, "sample", None)):
            raise TypeError(
                f"ImaginedEnv: replay_buffer must have a sample(batch_size) method, got "
                f"{type(replay_buffer).__name__}"
            )
        super().__init__(
            world_model,
            observation_spec=observation_spec,
            action_spec=action_spec,
            reward_spec=reward_spec,
            done_spec=done_spec,
            state_spec=state_spec,
            params=params,
            buffers=buffers,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            validate_actions=validate_actions,
        )
        self.replay_buffer = replay_buffer
        if base_env is not None:
            self.set_specs_from_env(base_env)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        if tensordict is None and not self.batch_size:
            # The buffer decides the batch: sample() at its own batch size, flattened.
            self._output_plan()
            starts = self._checked_sample(None).reshape(-1)
            return self._select_starts(
                starts, self._state_keys_to_start(), starts.batch_size, "the sampled start states"
            )
        return super()._reset(tensordict, **kwargs)

    def sample_start_states(self, batch_size: torch.Size) -> TensorDictBase:
        """``replay_buffer.sample(n)`` for ``n`` sub-envs, reshaped to ``batch_size``.

        Args:
            batch_size: the batch size of the reset.

        Returns:
            The sampled TensorDict, batch ``batch_size``.
        """
        n = max(batch_size.numel(), 1)
        return self._checked_sample(n).reshape(-1)[:n].reshape(batch_size)

    def _checked_sample(self, n: int | None) -> TensorDictBase:
        sample = self.replay_buffer.sample() if n is None else self.replay_buffer.sample(n)
        if isinstance(sample, tuple):  # (data, info) from buffers that return both
            sample = sample[0]
        if not isinstance(sample, TensorDictBase):
            raise TypeError(
                f"ImaginedEnv: replay_buffer.sample() returned {type(sample).__name__}; it must "
                "return a TensorDict holding the start states"
            )
        if n is not None and sample.numel() < n:
            raise ValueError(
                f"ImaginedEnv: replay_buffer.sample({n}) returned {sample.numel()} states, "
                f"fewer than the {n} sub-envs to reset"
            )
        return sample
