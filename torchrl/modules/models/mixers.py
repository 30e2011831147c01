"""Value-decomposition mixers for cooperative multi-agent Q-learning (VDN, QMIX)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from torchrl._types import DeviceLike


class Mixer(nn.Module):
    """Base of the mixers: ``[*B, n_agents, 1]`` chosen action values (+ state) -> ``[*B, 1]``.

    Args:
        n_agents: number of agents.
        needs_state: whether :meth:`forward` takes the global state as second input.
        state_shape: shape of the global state (when ``needs_state``).
        device: device of the parameters.

    Examples:
        A mixer whose team value is the best agent's (subclasses write :meth:`mix`):

        >>> import torch
        >>> class MaxMixer(Mixer):
        ...     def __init__(self, n_agents):
        ...         super().__init__(n_agents, needs_state=False)
        ...     def mix(self, chosen, state):
        ...         return chosen.max(-1, keepdim=True).values
        >>> MaxMixer(3)(torch.tensor([[[1.0], [4.0], [2.0]]]))  # [B=1, n_agents=3, 1]
        tensor([[4.]])
    """

    def __init__(
        self,
        n_agents: int,
        needs_state: bool,
        state_shape: Sequence[int] | torch.Size | int = (),
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        self.n_agents = n_agents
        self.needs_state = needs_state
        self.state_shape = torch.Size(
            [state_shape] if isinstance(state_shape, int) else state_shape
        )
        self.device = device

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        expected = 2 if self.needs_state else 1
        if len(inputs) != expected:
            raise TypeError(
                f"{type(self).__name__} takes {expected} input(s) "
                f"({'chosen_action_value, state' if self.needs_state else 'chosen_action_value'}), "
                f"got {len(inputs)}"
            )
        chosen = inputs[0]
        if chosen.ndim < 2 or chosen.shape[-2:] != (self.n_agents, 1):
            raise ValueError(
                f"chosen action values must be [*B, n_agents={self.n_agents}, 1], "
                f"got {tuple(chosen.shape)}"
            )
        batch = chosen.shape[:-2]
        if self.needs_state:
            state = inputs[1]
            if state.shape != (*batch, *self.state_shape):
                raise ValueError(
                    f"state must be [*B, *state_shape] = {(*batch, *self.state_shape)}, "
                    f"got {tuple(state.shape)}"
                )
            # Flatten the batch dims so the subclass sees [N, n_agents] and [N, state_dim].
            out = self.mix(chosen.reshape(-1, self.n_agents), state.reshape(batch.numel(), -1))
        else:
            out = self.mix(chosen.reshape(-1, self.n_agents), None)
        return out.reshape(*batch, 1)

    def mix(self, chosen: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """Mixes ``[N, n_agents]`` values (and ``[N, state_dim]`` states) into ``[N, 1]``."""
        raise NotImplementedError


class VDNMixer(Mixer):
    """Value-Decomposition Networks mixer (Sunehag et al. 2017): the sum of the agents' values.

    Args:
        n_agents: number of agents.
        device: unused (no parameters); kept for a uniform signature.

    Examples:
        >>> VDNMixer(n_agents=3)(torch.ones(8, 3, 1)).squeeze(-1)
        tensor([3., 3., 3., 3., 3., 3., 3., 3.])
    """

    def __init__(self, n_agents: int, device: DeviceLike = None) -> None:
        super().__init__(n_agents=n_agents, needs_state=False, device=device)

    def mix(self, chosen: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        return chosen.sum(-1, keepdim=True)


class QMixer(Mixer):
    """QMIX mixer (Rashid et al. 2018): a state-conditioned monotonic mixing network.

    Hypernetworks map the global state to non-negative mixing weights (absolute values), so
    the joint value is monotonic in every agent's value.

    Args:
        state_shape: shape of the global state.
        mixing_embed_dim: width of the mixing layer.
        n_agents: number of agents.
        device: device of the parameters.

    Examples:
        >>> mixer = QMixer(state_shape=(5,), mixing_embed_dim=8, n_agents=3)
        >>> mixer(torch.zeros(4, 3, 1), torch.zeros(4, 5)).shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        state_shape: Sequence[int] | torch.Size | int,
        mixing_embed_dim: int,
        n_agents: int,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(
            n_agents=n_agents, needs_state=True, state_shape=state_shape, device=device
        )
        state_dim = math.prod(self.state_shape)
        self.embed_dim = mixing_embed_dim
        self.hyper_w_1 = nn.Linear(state_dim, mixing_embed_dim * n_agents, device=device)
        self.hyper_w_final = nn.Linear(state_dim, mixing_embed_dim, device=device)
        self.hyper_b_1 = nn.Linear(state_dim, mixing_embed_dim, device=device)
        self.V = nn.Sequential(
            nn.Linear(state_dim, mixing_embed_dim, device=device),
            nn.ReLU(),
            nn.Linear(mixing_embed_dim, 1, device=device),
        )

    def mix(self, chosen: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        assert state is not None
        w1 = self.hyper_w_1(state).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(state).unsqueeze(1)
        hidden = nn.functional.elu(torch.bmm(chosen.unsqueeze(1), w1) + b1)  # [N, 1, E]
        w_final = self.hyper_w_final(state).abs().unsqueeze(-1)  # [N, E, 1]
        return torch.bmm(hidden, w_final).squeeze(1) + self.V(state)
