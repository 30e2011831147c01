"""``DiffusionActor``: a policy that samples actions by running a DDPM reverse chain.

Diffusion Policy (Chi et al., 2023): a network ``eps(a_t, o, t)`` is trained to predict the
Gaussian noise that the forward process added to a demonstrated action (see
:class:`~torchrl.objectives.DiffusionBCLoss`); acting denoises a Gaussian latent in
``num_steps`` steps, conditioned on the observation. Because the chain samples from the learned
conditional distribution instead of regressing its mean, multi-modal demonstrations (go left *or*
right around an obstacle) give one of the modes rather than their average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict.nn import InteractionType, TensorDictModule, interaction_type
from torch import Tensor, nn

from torchrl._keys import ACTION, OBSERVATION
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import as_composite, leaf_spec, module_keys

if TYPE_CHECKING:
    from torchrl.data.specs.base import TensorSpec

__all__ = ["DiffusionActor"]

# The interaction types that ask for a repeatable action instead of a sample.
_NOISELESS = (InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN)


class _ScoreMLP(nn.Module):
    """The default noise predictor: an MLP over ``(noisy_action, observation, t_embedding)``.

    It takes the documented input (the three concatenated along the last dim, ``t`` a raw
    integer step) and replaces the raw step by sinusoidal features of ``t / num_steps``: an MLP
    reads an integer in ``[0, 100)`` badly, and the embedding is the usual remedy (Ho et al.).
    """

    freqs: Tensor

    def __init__(
        self,
        action_dim: int,
        obs_dim: int | None,
        num_steps: int,
        num_cells: Sequence[int],
        time_features: int = 16,
    ) -> None:
        super().__init__()
        self.num_steps = num_steps
        self.register_buffer(
            "freqs", torch.exp(torch.linspace(0.0, math.log(1000.0), time_features // 2))
        )
        layers: list[nn.Module] = []
        first: nn.Module
        width = num_cells[0]
        if obs_dim is None:
            first = nn.LazyLinear(width)
        else:
            first = nn.Linear(action_dim + obs_dim + 2 * (time_features // 2), width)
        layers += [first, nn.Mish()]
        for w_in, w_out in zip(num_cells[:-1], num_cells[1:]):
            layers += [nn.Linear(w_in, w_out), nn.Mish()]
        layers.append(nn.Linear(num_cells[-1], action_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, inputs: Tensor) -> Tensor:
        features, t = inputs[..., :-1], inputs[..., -1:]
        phase = (t / self.num_steps) * self.freqs
        return self.net(torch.cat([features, phase.sin(), phase.cos()], -1))


class _DDPMModule(nn.Module):
    """The noise schedule, the forward (noising) process and the reverse (sampling) chain.

    Actions are mapped to a latent in ``[-1, 1]`` when the action bounds are known; the
    chain runs on that latent and the result is mapped back.
    """

    alphas_cumprod: Tensor
    betas: Tensor
    post_coef_x0: Tensor
    post_coef_xt: Tensor
    post_std: Tensor
    low: Tensor | None
    high: Tensor | None

    def __init__(
        self,
        score_network: nn.Module,
        action_dim: int,
        num_steps: int,
        beta_start: float,
        beta_end: float,
        low: Tensor | None,
        high: Tensor | None,
        clip_sample: bool,
    ) -> None:
        super().__init__()
        self.score_network = score_network
        self.action_dim = action_dim
        self.num_steps = num_steps
        self.clip_sample = clip_sample
        betas = torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
        alphas = 1.0 - betas
        abar = torch.cumprod(alphas, 0)
        abar_prev = torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])
        # Posterior q(a_{t-1} | a_t, a_0) = N(c0 * a_0 + ct * a_t, var) (Ho et al., eq. 7).
        var = betas * (1.0 - abar_prev) / (1.0 - abar)
        self.register_buffer("betas", betas.float())
        self.register_buffer("alphas_cumprod", abar.float())
        self.register_buffer("post_coef_x0", (abar_prev.sqrt() * betas / (1.0 - abar)).float())
        self.register_buffer(
            "post_coef_xt", (alphas.sqrt() * (1.0 - abar_prev) / (1.0 - abar)).float()
        )
        self.register_buffer("post_std", var.clamp_min(0.0).sqrt().float())
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    # -- action <-> latent --------------------------------------------------------------------
    def to_latent(self, action: Tensor) -> Tensor:
        """Maps actions in ``[low, high]`` to ``[-1, 1]`` (identity without bounds)."""
        if self.low is None or self.high is None:
            return action
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def from_latent(self, latent: Tensor) -> Tensor:
        """The inverse of :meth:`to_latent`."""
        if self.low is None or self.high is None:
            return latent
        return self.low + (latent + 1.0) * 0.5 * (self.high - self.low)

    # -- training ------------------------------------------------------------------------------
    def add_noise(
        self, clean_action: Tensor, t: Tensor, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Forward process: ``sqrt(abar_t) * a_0 + sqrt(1 - abar_t) * noise`` on the latent.

        Args:
            clean_action: actions ``[*B, action_dim]`` (environment units).
            t: integer steps ``[*B]`` in ``[0, num_steps)``.
            noise: the Gaussian noise ``[*B, action_dim]`` (drawn when ``None``).

        Returns:
            ``(noisy_latent, noise)``, both ``[*B, action_dim]``.
        """
        x0 = self.to_latent(clean_action)
        if noise is None:
            noise = torch.randn_like(x0)
        abar = self.alphas_cumprod[t].unsqueeze(-1)
        return abar.sqrt() * x0 + (1.0 - abar).sqrt() * noise, noise

    def predict_noise(self, noisy_latent: Tensor, observation: Tensor, t: Tensor) -> Tensor:
        """The score network on ``cat(noisy_latent, observation, t)`` (``t``: ``[*B]`` ints)."""
        step = t.to(noisy_latent.dtype).unsqueeze(-1)
        return self.score_network(torch.cat([noisy_latent, observation, step], -1))

    # -- sampling ------------------------------------------------------------------------------
    def forward(self, *observations: Tensor) -> Tensor:
        observation = observations[0] if len(observations) == 1 else torch.cat(observations, -1)
        batch = observation.shape[:-1]
        shape = (*batch, self.action_dim)
        noiseless = interaction_type() in _NOISELESS
        if noiseless:
            x = observation.new_zeros(shape)
        else:
            x = torch.randn(shape, dtype=observation.dtype, device=observation.device)
        for step in range(self.num_steps - 1, -1, -1):
            t = torch.full(batch, step, dtype=torch.long, device=observation.device)
            eps = self.predict_noise(x, observation, t)
            abar = self.alphas_cumprod[step]
            x0 = (x - (1.0 - abar).sqrt() * eps) / abar.sqrt()
            if self.clip_sample:
                x0 = x0.clamp(-1.0, 1.0)
            x = self.post_coef_x0[step] * x0 + self.post_coef_xt[step] * x
            if step > 0 and not noiseless:
                x = x + self.post_std[step] * torch.randn_like(x)
        return self.from_latent(x)


def _bounds(spec: Any, key: NestedKey) -> tuple[Tensor | None, Tensor | None]:
    """The finite ``(low, high)`` of the action spec, or ``(None, None)``."""
    leaf = leaf_spec(spec, key)
    low = getattr(leaf, "low", None)
    high = getattr(leaf, "high", None)
    if low is None or high is None:
        return None, None
    low = torch.as_tensor(low, dtype=torch.float32).clone()
    high = torch.as_tensor(high, dtype=torch.float32).clone()
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        return None, None
    if low.ndim > 1:
        # A batched env's spec repeats the bounds over its batch dims: keep one row.
        rows_low, rows_high = low.reshape(-1, low.shape[-1]), high.reshape(-1, high.shape[-1])
        if not (
            torch.equal(rows_low, rows_low[:1].expand_as(rows_low))
            and torch.equal(rows_high, rows_high[:1].expand_as(rows_high))
        ):
            raise ValueError(
                f"DiffusionActor: the action bounds of {key!r} differ across the spec's batch "
                "dims; pass the spec of one env"
            )
        low, high = rows_low[0], rows_high[0]
    return low, high


class DiffusionActor(TensorDictModule):
    """A diffusion policy: denoises a Gaussian latent into an action, conditioned on observations.

    A fixed linear DDPM schedule (``beta_start`` to ``beta_end`` over ``num_steps``) and a
    noise-prediction network; train it with :class:`~torchrl.objectives.DiffusionBCLoss`. A call
    runs the whole reverse chain (``num_steps`` network calls). Under a ``DETERMINISTIC``
    (or ``MODE``/``MEAN``) exploration type the chain starts from a zero latent and injects no
    noise: repeatable, but not a sample from the learned distribution.

    Args:
        action_dim: the action size.
        obs_dim: the observation size, for the default network (``None``: a lazy first layer,
            to be run once before training).
        score_network: predicts the noise from ``cat(noisy_action, observation, t)``
            (``[*B, action_dim + obs_dim + 1]``, ``t`` a raw integer step) as ``[*B, action_dim]``.
            Default: a two-hidden-layer Mish MLP of width 256 with a sinusoidal step embedding.
        num_steps: number of denoising steps. With few steps raise ``beta_end`` so that the
            chain still ends near pure noise (``prod(1 - beta)`` small).
        beta_start, beta_end: the linear noise schedule.
        in_keys: observation keys (default ``["observation"]``; several are concatenated).
        out_keys: the action key (default ``["action"]``).
        spec: the action spec; with finite bounds the chain runs on actions rescaled to
            ``[-1, 1]`` and the output lands inside the bounds.
        clip_sample: clip the predicted clean latent to ``[-1, 1]`` at each step (default:
            when ``spec`` has finite bounds).
        num_cells: hidden widths of the default network.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded
        >>> actor = DiffusionActor(2, obs_dim=3, num_steps=10, spec=Bounded(-1.0, 1.0, (2,)))
        >>> td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, bool(td["action"].abs().max() <= 1)
        (torch.Size([5, 2]), True)
    """

    module: _DDPMModule

    def __init__(
        self,
        action_dim: int,
        obs_dim: int | None = None,
        score_network: nn.Module | None = None,
        num_steps: int = 100,
        beta_start: float = 1e-4,
        beta_end: float = 0.02,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        clip_sample: bool | None = None,
        num_cells: Sequence[int] = (256, 256),
    ) -> None:
        if action_dim < 1:
            raise ValueError(f"DiffusionActor: action_dim must be >= 1, got {action_dim}")
        if num_steps < 1:
            raise ValueError(f"DiffusionActor: num_steps must be >= 1, got {num_steps}")
        if not 0.0 < beta_start <= beta_end < 1.0:
            raise ValueError(
                "DiffusionActor: need 0 < beta_start <= beta_end < 1, got "
                f"beta_start={beta_start}, beta_end={beta_end}"
            )
        in_keys = [OBSERVATION] if in_keys is None else list(in_keys)
        out_keys = [ACTION] if out_keys is None else list(out_keys)
        if len(out_keys) != 1:
            raise ValueError(f"DiffusionActor writes one action key, got out_keys={out_keys}")
        low, high = _bounds(spec, out_keys[0])
        if clip_sample is None:
            clip_sample = low is not None
        if score_network is None:
            score_network = _ScoreMLP(action_dim, obs_dim, num_steps, list(num_cells))
        ddpm = _DDPMModule(
            score_network, action_dim, num_steps, beta_start, beta_end, low, high, clip_sample
        )
        super().__init__(ddpm, in_keys=module_keys(in_keys), out_keys=module_keys(out_keys))
        self.spec = as_composite(spec, out_keys)

    @property
    def num_steps(self) -> int:
        """The number of denoising steps of one call."""
        return self.module.num_steps

    @property
    def score_network(self) -> nn.Module:
        """The noise-prediction network."""
        return self.module.score_network
