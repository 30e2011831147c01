"""Batch renormalisation (Ioffe 2017), as used by CrossQ."""

from __future__ import annotations

import torch
from torch import nn

from torchrl._types import DeviceLike


class BatchRenorm1d(nn.Module):
    """Batch renormalisation over the last dimension of ``[*B, num_features]`` inputs.

    In training, the batch is normalised with its own statistics and then corrected towards the
    running statistics: ``x_hat = (x - mu_B) / sigma_B * r + d`` with
    ``r = clip(sigma_B / sigma, 1/max_r, max_r)`` and ``d = clip((mu_B - mu) / sigma, ±max_d)``
    (no gradient through ``r`` and ``d``). For the first ``warmup_steps`` calls ``r = 1, d = 0``
    (plain batch norm); with ``smooth=True`` the correction ramps in linearly over the warm-up.
    In eval mode the running statistics are used.

    Args:
        num_features: size of the last dimension.
        momentum: update rate of the running statistics.
        eps: added to the variance.
        max_r: bound on the scale correction.
        max_d: bound on the shift correction.
        warmup_steps: training calls before the corrections are applied.
        smooth: ramp the corrections in during the warm-up instead of switching them on.
        device: device of the parameters.

    Examples:
        >>> norm = BatchRenorm1d(3)  # in warm-up: plain batch norm
        >>> out = norm(torch.randn(64, 3) * 5 + 2)
        >>> bool(out.mean(0).abs().max() < 1e-5)
        True
        >>> _ = norm.eval(); norm(torch.zeros(2, 3)).shape  # running statistics
        torch.Size([2, 3])
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.01,
        eps: float = 1e-5,
        max_r: float = 3.0,
        max_d: float = 5.0,
        warmup_steps: int = 10000,
        smooth: bool = False,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.momentum = momentum
        self.eps = eps
        self.max_r = max_r
        self.max_d = max_d
        self.warmup_steps = warmup_steps
        self.smooth = smooth
        self.weight = nn.Parameter(torch.ones(num_features, device=device))
        self.bias = nn.Parameter(torch.zeros(num_features, device=device))
        self.register_buffer("running_mean", torch.zeros(num_features, device=device))
        self.register_buffer("running_var", torch.ones(num_features, device=device))
        self.register_buffer(
            "num_batches_tracked", torch.zeros((), dtype=torch.long, device=device)
        )

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[-1] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} features in the last dim, got {tuple(value.shape)}"
            )
        if not self.training:
            x_hat = (value - self.running_mean) / (self.running_var + self.eps).sqrt()
            return x_hat * self.weight + self.bias
        flat = value.reshape(-1, self.num_features)
        if flat.shape[0] < 2:
            raise ValueError("BatchRenorm1d needs at least 2 samples per batch in training mode")
        batch_mean = flat.mean(0)
        batch_var = flat.var(0, unbiased=False)
        batch_std = (batch_var + self.eps).sqrt()
        running_std = (self.running_var + self.eps).sqrt()
        x_hat = (value - batch_mean) / batch_std
        with torch.no_grad():
            r = (batch_std / running_std).clamp(1 / self.max_r, self.max_r)
            d = ((batch_mean - self.running_mean) / running_std).clamp(-self.max_d, self.max_d)
            # The warm-up weight stays a tensor: no host sync on the step counter.
            steps = self.num_batches_tracked.to(r.dtype)
            if self.smooth:
                ramp = (steps / max(self.warmup_steps, 1)).clamp(max=1.0)
            else:
                ramp = (steps >= self.warmup_steps).to(r.dtype)
            r = 1 + (r - 1) * ramp
            d = d * ramp
        x_hat = x_hat * r + d
        with torch.no_grad():
            n = flat.shape[0]
            # a + m * (b - a), as lerp_, written with ops torch.vmap batches (ensembles of
            # critics run under vmap; lerp_ there takes torch's slow per-member fallback).
            self.running_mean.add_(self.momentum * (batch_mean.detach() - self.running_mean))
            unbiased = batch_var.detach() * n / (n - 1)
            self.running_var.add_(self.momentum * (unbiased - self.running_var))
            self.num_batches_tracked += 1
        return x_hat * self.weight + self.bias
