"""Flow-matching action models of Flow Q-Learning (Park, Li and Levine, 2025).

:class:`FlowMatchingModel` integrates a learned velocity field from Gaussian noise (time 0) to
an action (time 1) with Euler steps; :class:`OneStepModel` maps the same noise to an action in
one network call and is distilled from the flow. Both take and return plain tensors; the loss
:class:`~torchrl.objectives.FQLLoss` trains them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["FlowMatchingModel", "OneStepModel"]


def _bounds(name: str, low: float | Tensor, high: float | Tensor) -> tuple[Tensor, Tensor]:
    low_t = torch.as_tensor(low, dtype=torch.get_default_dtype()).detach().clone()
    high_t = torch.as_tensor(high, dtype=torch.get_default_dtype()).detach().clone()
    if not bool((low_t < high_t).all()):
        raise ValueError(f"{name}: low must be strictly less than high, got {low} and {high}")
    return low_t, high_t


def _noise(name: str, observation: Tensor, noise: Tensor | None, action_dim: int) -> Tensor:
    if noise is None:
        shape = (*observation.shape[:-1], action_dim)
        return torch.randn(shape, device=observation.device, dtype=observation.dtype)
    if noise.shape[-1] != action_dim:
        raise ValueError(
            f"{name}: noise has {noise.shape[-1]} coordinates in its last dim, expected "
            f"action_dim={action_dim}"
        )
    return noise


class FlowMatchingModel(nn.Module):
    """Euler sampler of a flow-matching policy for bounded continuous actions.

    From ``x_0 = noise`` the model takes ``num_steps`` steps
    ``x <- x + v(observation, x, t) / num_steps`` at ``t = 0, 1/n, ...``, then clips ``x`` to
    ``[low, high]``. The velocity is trained to match ``a - x_0`` along the straight path
    ``(1 - t) x_0 + t a`` to a data action ``a`` (see :meth:`velocity`).

    Args:
        velocity_network: maps ``cat([observation, action, t], -1)`` (``[*B, obs + act + 1]``)
            to a velocity ``[*B, action_dim]``.
        action_dim: number of action coordinates.
        num_steps: Euler integration steps.
        low: lower action bound, broadcast over the actions; strictly below ``high``.
        high: upper action bound.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = FlowMatchingModel(nn.Linear(3 + 2 + 1, 2), action_dim=2, num_steps=4)
        >>> action = model(torch.zeros(5, 3), noise=torch.zeros(5, 2))
        >>> action.shape
        torch.Size([5, 2])
        >>> bool(action.abs().max() <= 1)
        True
    """

    low: Tensor
    high: Tensor

    def __init__(
        self,
        velocity_network: nn.Module,
        action_dim: int,
        num_steps: int = 10,
        *,
        low: float | Tensor = -1.0,
        high: float | Tensor = 1.0,
    ) -> None:
        super().__init__()
        if num_steps < 1:
            raise ValueError(f"FlowMatchingModel: num_steps must be >= 1, got {num_steps}")
        if action_dim < 1:
            raise ValueError(f"FlowMatchingModel: action_dim must be >= 1, got {action_dim}")
        low_t, high_t = _bounds("FlowMatchingModel", low, high)
        self.velocity_network = velocity_network
        self.action_dim = int(action_dim)
        self.num_steps = int(num_steps)
        self.register_buffer("low", low_t)
        self.register_buffer("high", high_t)

    def velocity(self, observation: Tensor, action: Tensor, time: Tensor) -> Tensor:
        """The velocity field at ``(observation, action, time)``.

        Args:
            observation: ``[*B, obs_dim]``.
            action: the point on the path, ``[*B, action_dim]``.
            time: ``[*B, 1]`` (or a scalar), in ``[0, 1]``.

        Returns:
            ``[*B, action_dim]``.
        """
        time = torch.as_tensor(time, dtype=action.dtype, device=action.device)
        time = time.expand(*action.shape[:-1], 1)
        return self.velocity_network(torch.cat([observation, action, time], -1))

    def forward(self, observation: Tensor, noise: Tensor | None = None) -> Tensor:
        """Integrates the flow from ``noise`` (standard normal when ``None``).

        Args:
            observation: ``[*B, obs_dim]``.
            noise: ``[*B, action_dim]``.

        Returns:
            The clipped action ``[*B, action_dim]``.
        """
        x = _noise("FlowMatchingModel", observation, noise, self.action_dim)
        dt = 1.0 / self.num_steps
        for i in range(self.num_steps):
            x = x + dt * self.velocity(observation, x, torch.tensor(i * dt))
        return torch.minimum(torch.maximum(x, self.low.to(x)), self.high.to(x))


class OneStepModel(nn.Module):
    """One-step policy: ``action = network(cat([observation, noise], -1))``, clipped.

    The student of Flow Q-Learning: it is distilled from a :class:`FlowMatchingModel` fed the
    same noise and pushed towards high Q-values. The network has no output activation; the
    distillation uses the unclipped output (``clamp=False``). Noise is drawn when not given,
    whatever the exploration mode: pass it for repeatable actions.

    Args:
        network: maps ``[*B, obs_dim + action_dim]`` to ``[*B, action_dim]``.
        action_dim: number of action coordinates.
        low: lower action bound, broadcast over the actions; strictly below ``high``.
        high: upper action bound.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = OneStepModel(nn.Linear(3 + 2, 2), action_dim=2, low=-0.5, high=0.5)
        >>> obs, noise = 10 * torch.ones(4, 3), torch.ones(4, 2)
        >>> bool(model(obs, noise).abs().max() <= 0.5)
        True
        >>> model(obs, noise, clamp=False).shape
        torch.Size([4, 2])
    """

    low: Tensor
    high: Tensor

    def __init__(
        self,
        network: nn.Module,
        action_dim: int,
        *,
        low: float | Tensor = -1.0,
        high: float | Tensor = 1.0,
    ) -> None:
        super().__init__()
        if action_dim < 1:
            raise ValueError(f"OneStepModel: action_dim must be >= 1, got {action_dim}")
        low_t, high_t = _bounds("OneStepModel", low, high)
        self.network = network
        self.action_dim = int(action_dim)
        self.register_buffer("low", low_t)
        self.register_buffer("high", high_t)

    def forward(
        self, observation: Tensor, noise: Tensor | None = None, *, clamp: bool = True
    ) -> Tensor:
        """Maps noise to an action in one call.

        Args:
            observation: ``[*B, obs_dim]``.
            noise: ``[*B, action_dim]`` (standard normal when ``None``).
            clamp: clip the action to ``[low, high]``.

        Returns:
            ``[*B, action_dim]``.
        """
        noise = _noise("OneStepModel", observation, noise, self.action_dim)
        action = self.network(torch.cat([observation, noise], -1))
        if clamp:
            action = torch.minimum(torch.maximum(action, self.low.to(action)), self.high.to(action))
        return action
