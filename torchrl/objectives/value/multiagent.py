"""GAE for multi-agent data: per-agent values with shared or per-agent rewards and episode ends.

In a multi-agent rollout (batch ``[*B, T]``) the group entries carry extra agent dims after the
batch dims: values and rewards are ``[*B, T, n_agents, 1]`` while the episode end is often only
known per env (root ``("next", "done")``, ``[*B, T, 1]``), and a cooperative task may give one
shared reward ``[*B, T, 1]``. :class:`MultiAgentGAE` aligns every input on the batch dims and
broadcasts them to one shape before the recursion, so the stock GAE arithmetic runs once over
all agents (no loop over agents).
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import Tensor

import torchrl.objectives.value.functional as vf
from torchrl.objectives.value.estimators import GAE, next_key, standardize

__all__ = ["MultiAgentGAE"]


def _align(tensors: list[Tensor], batch_dims: int) -> list[Tensor]:
    """Broadcasts tensors shaped ``[*batch, *rest_i]`` to one shape ``[*batch, *rest]``.

    Missing dims are inserted right after the batch dims (``[E, T, 1]`` becomes
    ``[E, T, 1, 1]`` next to ``[E, T, n, 1]``): the agent dims sit between the batch dims and
    the trailing feature dim.
    """
    ndim = max(t.ndim for t in tensors)
    shaped = []
    for t in tensors:
        missing = ndim - t.ndim
        if missing:
            t = t.reshape(*t.shape[:batch_dims], *([1] * missing), *t.shape[batch_dims:])
        shaped.append(t)
    shape = torch.broadcast_shapes(*(t.shape for t in shaped))
    return [t.expand(shape) for t in shaped]


class MultiAgentGAE(GAE):
    """GAE whose rewards, done flags and values may have different agent dims.

    Reads the same keys as :class:`~torchrl.objectives.value.GAE` (point them at the group
    entries with :meth:`set_keys`, e.g. ``reward=("agents", "reward")``). Tensors laid out
    ``[*B, T, *agent_dims, 1]`` and ``[*B, T, 1]`` are broadcast together (shared reward or root
    done flags repeated over the agents); the advantage and value target come out in the
    broadcast shape (e.g. ``[*B, T, n_agents, 1]``). The time dim is the TensorDict's
    (``time_dim``, default its last batch dim), so layouts ``[E, T]`` and ``[E, n_agents, T]``
    both work.

    Args:
        gamma: the discount.
        lmbda: GAE's lambda, in ``[0, 1]``.
        average_gae: standardize the advantage (zero mean, unit standard deviation).
        vectorized: use the O(log T) blocked solver instead of the C++/loop path.
        **options: ``value_network`` (writes the per-agent state value, or ``None`` when
            given) and the other options of
            :class:`~torchrl.objectives.value.ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"agents": {"state_value": torch.zeros(2, 5, 3, 1)},
        ...     "next": {"agents": {"state_value": torch.zeros(2, 5, 3, 1),
        ...     "reward": torch.ones(2, 5, 3, 1)},
        ...     "done": torch.zeros(2, 5, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(2, 5, 1, dtype=torch.bool)}}, batch_size=[2, 5])
        >>> gae = MultiAgentGAE(gamma=0.9, lmbda=0.9).set_keys(
        ...     value=("agents", "state_value"), reward=("agents", "reward"),
        ...     advantage=("agents", "advantage"), value_target=("agents", "value_target"))
        >>> gae(td)["agents", "advantage"].shape
        torch.Size([2, 5, 3, 1])
    """

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        keys = self.tensor_keys
        reward = self._get(td, next_key(keys.reward), "reward")
        done = self._get(td, next_key(keys.done), "done")
        terminated = td.get(next_key(keys.terminated), None)
        if terminated is None:
            terminated = done
        gamma = self.gamma
        steps = td.get(keys.steps_to_next_obs, None)
        parts = [reward, done, terminated, value, next_value]
        if steps is not None:
            parts.append(steps)
        try:
            aligned = _align(parts, td.batch_dims)
        except RuntimeError as err:
            shapes = {
                "reward": tuple(reward.shape),
                "done": tuple(done.shape),
                "terminated": tuple(terminated.shape),
                "value": tuple(value.shape),
            }
            raise ValueError(
                f"{type(self).__name__}: the reward, done flags and values cannot be broadcast "
                f"together over the agent dims (batch dims {tuple(td.batch_size)}): {shapes}"
            ) from err
        reward, done, terminated, value, next_value = aligned[:5]
        if steps is not None:
            base = torch.as_tensor(gamma, device=reward.device, dtype=reward.dtype)
            gamma = base ** aligned[5].to(reward.dtype)
        adv, target = vf.generalized_advantage_estimate(
            gamma,
            self.lmbda,
            value.contiguous(),
            next_value.contiguous(),
            reward.contiguous(),
            done.contiguous(),
            terminated.contiguous(),
            time_dim=self._td_time_dim(td) - reward.ndim,
            vectorized=self.vectorized,
        )
        if self.average_gae:
            adv = standardize(adv)
        return adv, target
