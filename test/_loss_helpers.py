"""Shared pieces of the loss tests: tiny networks, fixed batches and reference helpers.

The reference computations in the test files read the networks' weights and redo the
published formulas with plain torch operations (``F.linear``, ``torch.tanh``, ...), never
calling the loss modules or the library's value functions.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import distributions as D
from torch import nn
from torch.nn import functional as F

from torchrl.modules import ProbabilisticActor


@contextmanager
def float64():
    """Runs the block with float64 as the default dtype (references to 1e-10)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


# ------------------------------------------------------------------------------------------
# Networks
# ------------------------------------------------------------------------------------------


def mlp(n_in: int, n_out: int, hidden: int = 5) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


class ConcatMLP(nn.Module):
    """Q(s, a): an MLP on the concatenated inputs."""

    def __init__(self, n_in: int, n_out: int = 1, hidden: int = 5) -> None:
        super().__init__()
        self.net = mlp(n_in, n_out, hidden)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat(inputs, -1))


class LocScale(nn.Module):
    """Splits the last dim in two: ``loc`` and ``scale = exp(.)``."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, log_scale = x.chunk(2, -1)
        return loc, log_scale.exp()


def linears(module: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(weight, bias)`` of every ``nn.Linear`` in ``module``, in order."""
    return [(m.weight, m.bias) for m in module.modules() if isinstance(m, nn.Linear)]


def stacked_linears(params: TensorDict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(weight [n, ...], bias [n, ...])`` pairs of a stacked ensemble, in layer order."""
    pairs = []
    for key in params.keys(True, True):
        if key[-1] == "weight":
            pairs.append((params.get(key), params.get((*key[:-1], "bias"))))
    return pairs


def ref_mlp(x: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``Linear -> tanh -> ... -> Linear`` with the given weights."""
    for i, (w, b) in enumerate(layers):
        x = F.linear(x, w, b)
        if i < len(layers) - 1:
            x = torch.tanh(x)
    return x


def gaussian_actor(obs_dim: int, act_dim: int, distribution_class=None, **kwargs):
    from torchrl.modules import IndependentNormal

    net = TensorDictModule(
        nn.Sequential(mlp(obs_dim, 2 * act_dim), LocScale()), ["observation"], ["loc", "scale"]
    )
    return ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=distribution_class or IndependentNormal,
        **kwargs,
    )


def categorical_actor(obs_dim: int, n_actions: int, one_hot: bool = True, **kwargs):
    from torchrl.modules import OneHotCategorical

    net = TensorDictModule(mlp(obs_dim, n_actions), ["observation"], ["logits"])
    dist = OneHotCategorical if one_hot else D.Categorical
    return ProbabilisticActor(net, in_keys=["logits"], distribution_class=dist, **kwargs)


class FixedNoiseTanhNormal(D.Distribution):
    """``tanh(loc + scale * eps)`` with a fixed, known ``eps`` (test-only).

    ``eps`` is ``linspace(-1.5, 1.5)`` over the sample's elements, so references can redo the
    sampling exactly. ``log_prob`` is the exact density of the squashed Gaussian.
    """

    has_rsample = True
    arg_constraints: dict = {}

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        self.loc, self.scale = loc, scale
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    @staticmethod
    def noise(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        return torch.linspace(-1.5, 1.5, math.prod(shape), dtype=dtype).reshape(shape)

    def rsample(self, sample_shape=()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.loc.shape
        return torch.tanh(self.loc + self.scale * self.noise(shape, self.loc.dtype))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        x = torch.atanh(value)
        return (D.Normal(self.loc, self.scale).log_prob(x) - torch.log1p(-value.pow(2))).sum(-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return torch.tanh(self.loc)


def ref_tanh_sample(loc: torch.Tensor, scale: torch.Tensor, shape: torch.Size | None = None):
    """The sample and log-probability ``FixedNoiseTanhNormal`` draws, from first principles."""
    shape = loc.shape if shape is None else shape
    eps = torch.linspace(-1.5, 1.5, math.prod(shape), dtype=loc.dtype).reshape(shape)
    x = loc + scale * eps
    action = torch.tanh(x)
    # log N(x; loc, scale) - log |d tanh / dx|
    log_normal = -0.5 * eps.pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_prob = (log_normal - torch.log(1 - action.pow(2))).sum(-1)
    return action, log_prob


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------


def transition_batch(
    batch: int,
    obs_dim: int,
    action: torch.Tensor,
    seed: int = 0,
) -> TensorDict:
    """One-step transitions ``[batch]`` with a few terminations and truncations."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.zeros(batch, 1, dtype=torch.bool)
    truncated = torch.zeros(batch, 1, dtype=torch.bool)
    terminated[1::4] = True
    truncated[2::5] = True
    dtype = torch.get_default_dtype()
    return TensorDict(
        {
            "observation": torch.randn(batch, obs_dim, generator=g, dtype=dtype),
            "action": action,
            "next": {
                "observation": torch.randn(batch, obs_dim, generator=g, dtype=dtype),
                "reward": torch.randn(batch, 1, generator=g, dtype=dtype),
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
            },
        },
        batch_size=[batch],
    )


def trajectory_batch(rows: int, steps: int, obs_dim: int, seed: int = 0) -> TensorDict:
    """Rollouts ``[rows, steps]`` with episode ends inside the rows (no actions)."""
    g = torch.Generator().manual_seed(seed)
    dtype = torch.get_default_dtype()
    done = torch.rand(rows, steps, 1, generator=g) < 0.2
    terminated = done & (torch.rand(rows, steps, 1, generator=g) < 0.5)
    return TensorDict(
        {
            "observation": torch.randn(rows, steps, obs_dim, generator=g, dtype=dtype),
            "next": {
                "observation": torch.randn(rows, steps, obs_dim, generator=g, dtype=dtype),
                "reward": torch.randn(rows, steps, 1, generator=g, dtype=dtype),
                "done": done,
                "terminated": terminated,
                "truncated": done & ~terminated,
            },
        },
        batch_size=[rows, steps],
    )


def ref_gae(gamma, lmbda, value, next_value, reward, done, terminated):
    """GAE by a plain loop over time (rows independent), from Schulman et al. (2016)."""
    adv = torch.zeros_like(reward)
    steps = reward.shape[-2]
    for t in reversed(range(steps)):
        boot = torch.where(terminated[..., t, :], 0.0, next_value[..., t, :])
        delta = reward[..., t, :] + gamma * boot - value[..., t, :]
        if t == steps - 1:
            adv[..., t, :] = delta
        else:
            carry = torch.where(done[..., t, :], 0.0, adv[..., t + 1, :])
            adv[..., t, :] = delta + gamma * lmbda * carry
    return adv


# ------------------------------------------------------------------------------------------
# Comparisons
# ------------------------------------------------------------------------------------------


def grads(value: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    out = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(out, params)]


def assert_matches(value, reference, params, atol: float = 1e-8, name: str = "") -> None:
    """Same value and same gradients w.r.t. ``params``."""
    torch.testing.assert_close(value, reference, atol=atol, rtol=1e-7, msg=f"{name}: value")
    got, want = grads(value, params), grads(reference, params)
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-6, msg=f"{name}: grad of param {i}")
