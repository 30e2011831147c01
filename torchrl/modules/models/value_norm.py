"""Scaling value targets for critics: running normalisers (PopArt, Welford) and invertible transforms.

A critic trained with one of these predicts in a *prediction space*: the value target ``G`` is
first mapped by a :class:`ValueTransform` ``f`` (e.g. symlog), then standardised by a
:class:`ValueNorm` ``n`` with running statistics, and the critic regresses ``n(f(G))``. Where real
values are needed (advantages, bootstrapped returns), a prediction ``p`` is mapped back with
``f^-1(n^-1(p))``; :class:`DecodedValueOperator` runs a critic and does that. The on-policy losses
(:class:`~torchrl.objectives.PPOLoss` and subclasses, :class:`~torchrl.objectives.A2CLoss`) take
``value_norm=`` and ``value_transform=`` and wire all of this.

Statistics live in buffers, so ``state_dict()`` checkpoints them with the module that owns them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._keys import STATE_VALUE
from torchrl._types import DeviceLike, NestedKey
from torchrl.modules import functional as F

__all__ = [
    "ComposeValueTransform",
    "DecodedValueOperator",
    "IdentityValueTransform",
    "PercentileValueNorm",
    "PopArtValueNorm",
    "RunningValueNorm",
    "SignedHyperbolicValueTransform",
    "SymLogValueTransform",
    "ValueNorm",
    "ValueTransform",
    "decode_value",
    "encode_value",
]


def _as_shape(shape: int | Sequence[int]) -> torch.Size:
    return torch.Size([shape]) if isinstance(shape, int) else torch.Size(shape)


# ------------------------------------------------------------------------------------------
# Normalisers
# ------------------------------------------------------------------------------------------


class ValueNorm(nn.Module):
    """Base class of value normalisers: running location/scale of the value targets.

    A subclass keeps statistics in buffers and implements :meth:`update`, :meth:`loc` and
    :meth:`scale`; :meth:`normalize` is ``(x - loc) / scale`` and :meth:`denormalize` its
    inverse. Tensors handled here end with :attr:`shape` (the per-element value shape, usually
    ``(1,)``); every leading dim (batch, time, agents) is reduced by :meth:`update`. Before the
    first update the map is the identity.

    Args:
        shape: per-element shape of the values (``1`` for a scalar value in a ``[*B, 1]``
            tensor).
        epsilon: added to the variance before its square root (keeps the scale positive).
        device: device of the statistics buffers.

    Examples:
        >>> vn = RunningValueNorm(shape=1)
        >>> vn.update(torch.tensor([[1.0], [3.0]]))
        >>> vn.normalize(torch.tensor([[3.0]]))
        tensor([[1.0000]])
        >>> vn.denormalize(torch.tensor([[1.0]]))
        tensor([[3.0000]])
    """

    def __init__(
        self,
        *,
        shape: int | Sequence[int] = 1,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        if epsilon <= 0:
            raise ValueError(f"{type(self).__name__}: epsilon must be > 0, got {epsilon}")
        self.shape = _as_shape(shape)
        self.epsilon = float(epsilon)
        self.device = device

    def _batch(self, value_target: torch.Tensor) -> torch.Tensor:
        """``value_target`` as ``[N, *shape]`` float64 samples (every leading dim flattened)."""
        n = len(self.shape)
        if value_target.shape[value_target.dim() - n :] != self.shape or value_target.dim() < n:
            raise ValueError(
                f"{type(self).__name__}: the values have shape {tuple(value_target.shape)}, "
                f"expected trailing dims {tuple(self.shape)} (the normaliser's shape)"
            )
        # float64 accumulation: returns of scale 1e3-1e4 squared lose digits in float32.
        return value_target.detach().reshape(-1, *self.shape).to(torch.float64)

    def update(self, value_target: torch.Tensor) -> None:
        """Folds a batch of value targets ``[*B, *shape]`` into the running statistics."""
        raise NotImplementedError(f"{type(self).__name__} does not implement update()")

    def loc(self) -> torch.Tensor:
        """The location subtracted by :meth:`normalize` (shape :attr:`shape`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement loc()")

    def scale(self) -> torch.Tensor:
        """The positive scale divided out by :meth:`normalize` (shape :attr:`shape`).

        Also what a quantity that must not be re-centred (an advantage) is divided by.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement scale()")

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Standardises ``value_target`` ``[*B, *shape]`` with the current statistics."""
        loc, scale = self.loc(), self.scale()
        return (value_target - loc.to(value_target.dtype)) / scale.to(value_target.dtype)

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`: back to the real value scale."""
        loc, scale = self.loc(), self.scale()
        return normalised_value * scale.to(normalised_value.dtype) + loc.to(normalised_value.dtype)

    def forward(self, value_target: torch.Tensor) -> torch.Tensor:
        """Same as :meth:`normalize`."""
        return self.normalize(value_target)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.shape)}, epsilon={self.epsilon}"


class RunningValueNorm(ValueNorm):
    """Exact running mean and variance of every target seen (Chan/Welford merge, no decay).

    Suits stationary value scales; :class:`PopArtValueNorm` forgets old targets instead.

    Args:
        shape: per-element shape of the values (default ``1``).
        epsilon: added to the variance before the square root.
        device: device of the buffers ``count``, ``mean`` and ``var`` (population variance).

    Examples:
        >>> vn = RunningValueNorm(shape=1)
        >>> for chunk in torch.arange(10.0).reshape(5, 2, 1):
        ...     vn.update(chunk)
        >>> vn.loc(), vn.scale()
        (tensor([4.5000]), tensor([2.8723]))
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | Sequence[int] = 1,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64, device=device))
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64, device=device))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64, device=device))

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Merges the batch's mean and variance into the running ones (order-independent)."""
        batch = self._batch(value_target).to(self.mean.device)
        m = batch.shape[0]
        if m == 0:
            return
        b_mean = batch.mean(0)
        b_var = batch.var(0, unbiased=False)
        n = self.count
        total = n + m
        delta = b_mean - self.mean
        # With n == 0 this reduces to the batch statistics (the initial var is discarded).
        m2 = self.var * n + b_var * m + delta.square() * n * m / total
        self.mean.add_(delta * m / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def loc(self) -> torch.Tensor:
        return self.mean.to(torch.get_default_dtype())

    def scale(self) -> torch.Tensor:
        return (self.var + self.epsilon).sqrt().to(torch.get_default_dtype())


class PopArtValueNorm(ValueNorm):
    """PopArt normaliser: debiased exponential moving averages of the targets' mean and square.

    The "ART" of van Hasselt et al. (2016): ``mean = m / d``, ``var = s / d - mean^2`` with
    ``m, s, d`` updated as ``x <- beta x + (1 - beta) batch`` (``d`` tracks the weight given
    to real data, so early estimates are unbiased). With ``layer`` given, each update also
    does the "POP": the critic's last linear layer (which outputs normalised values) is
    rescaled so its *denormalised* outputs are the same before and after the statistics move.

    Args:
        shape: per-element shape of the values (default ``1``).
        beta: decay of the moving averages (closer to 1: slower; default ``0.99999``).
        epsilon: added to the variance; also the floor of the debiasing term.
        device: device of the buffers ``running_mean``, ``running_mean_sq``,
            ``debiasing_term``.
        layer: the critic's output layer (``nn.Linear`` with ``shape.numel()`` outputs),
            rescaled in place by :meth:`update`. Not registered as a submodule (it belongs to
            the critic).

    Examples:
        >>> head = nn.Linear(4, 1)
        >>> vn = PopArtValueNorm(beta=0.9, layer=head)
        >>> x = torch.randn(8, 4)
        >>> before = vn.denormalize(head(x))
        >>> vn.update(torch.randn(32, 1) * 1000.0)
        >>> torch.allclose(vn.denormalize(head(x)), before, atol=1e-3)
        True
    """

    running_mean: torch.Tensor
    running_mean_sq: torch.Tensor
    debiasing_term: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | Sequence[int] = 1,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
        layer: nn.Linear | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"PopArtValueNorm: beta must lie in [0, 1), got {beta}")
        self.beta = float(beta)
        kw = {"dtype": torch.float64, "device": device}
        self.register_buffer("running_mean", torch.zeros(self.shape, **kw))  # type: ignore[arg-type]
        self.register_buffer("running_mean_sq", torch.zeros(self.shape, **kw))  # type: ignore[arg-type]
        self.register_buffer("debiasing_term", torch.zeros((), **kw))  # type: ignore[arg-type]
        if layer is not None:
            if not isinstance(layer, nn.Linear):
                raise TypeError(
                    f"PopArtValueNorm: layer must be an nn.Linear, got {type(layer).__name__}"
                )
            if layer.out_features != self.shape.numel():
                raise ValueError(
                    f"PopArtValueNorm: layer has {layer.out_features} outputs, expected "
                    f"{self.shape.numel()} (the normaliser's shape {tuple(self.shape)})"
                )
        # A tuple, not an attribute nn.Module would register: the layer's parameters belong
        # to the critic and must not appear twice in a loss's state_dict.
        self._layer: tuple[nn.Linear, ...] = () if layer is None else (layer,)

    @property
    def layer(self) -> nn.Linear | None:
        """The output layer kept consistent by :meth:`update` (``None`` when not given)."""
        return self._layer[0] if self._layer else None

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, var)`` in float64; ``(0, 1)`` before the first update."""
        debias = self.debiasing_term.clamp_min(self.epsilon)
        mean = self.running_mean / debias
        var = (self.running_mean_sq / debias - mean.square()).clamp_min(0.0)
        fresh = self.debiasing_term == 0
        return torch.where(fresh, 0.0, mean), torch.where(fresh, 1.0, var)

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Moves the averages towards the batch's and, with ``layer``, preserves its outputs."""
        batch = self._batch(value_target).to(self.running_mean.device)
        if batch.shape[0] == 0:
            return
        layer = self.layer
        if layer is not None:
            old_loc, old_scale = self.loc(), self.scale()
        weight = 1.0 - self.beta
        self.running_mean.lerp_(batch.mean(0), weight)
        self.running_mean_sq.lerp_(batch.square().mean(0), weight)
        self.debiasing_term.lerp_(torch.ones_like(self.debiasing_term), weight)
        if layer is not None:
            new_loc, new_scale = self.loc(), self.scale()
            ratio = (old_scale / new_scale).reshape(-1).to(layer.weight.dtype)
            layer.weight.mul_(ratio.to(layer.weight.device).unsqueeze(-1))
            if layer.bias is not None:
                shift = ((old_loc - new_loc) / new_scale).reshape(-1)
                layer.bias.mul_(ratio.to(layer.bias.device)).add_(
                    shift.to(device=layer.bias.device, dtype=layer.bias.dtype)
                )

    def loc(self) -> torch.Tensor:
        return self._stats()[0].to(torch.get_default_dtype())

    def scale(self) -> torch.Tensor:
        return (self._stats()[1] + self.epsilon).sqrt().to(torch.get_default_dtype())

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, beta={self.beta}, layer={self.layer is not None}"


class PercentileValueNorm(ValueNorm):
    """DreamerV3's return normalisation: moving averages of a low and a high batch quantile.

    ``scale = max(min_scale, high - low)``: large spans are scaled down, small (noisy) ones
    are never blown up. By default nothing is subtracted (``loc = 0``: the recipe for
    advantages, already centred); with ``center=True`` ``loc = low``, mapping the tracked
    range to ``[0, 1]``. Both averages start at 0 and move by ``x <- x + rate (q_batch - x)``.

    Args:
        shape: per-element shape of the values (default ``1``).
        quantiles: the ``(low, high)`` quantiles tracked (default ``(0.05, 0.95)``).
        rate: step of the moving averages towards the batch quantiles (default ``0.01``).
        min_scale: lower bound of the scale (default ``1.0``).
        center: subtract the low quantile in :meth:`normalize`.
        epsilon: floor of the scale (kept positive even with ``min_scale=0``).
        device: device of the buffers ``low`` and ``high``.

    Examples:
        >>> vn = PercentileValueNorm(rate=1.0)
        >>> vn.update(torch.linspace(0.0, 100.0, 101).unsqueeze(-1))
        >>> vn.low, vn.high, vn.scale()
        (tensor([5.], dtype=torch.float64), tensor([95.], dtype=torch.float64), tensor([90.]))
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | Sequence[int] = 1,
        quantiles: tuple[float, float] = (0.05, 0.95),
        rate: float = 0.01,
        min_scale: float = 1.0,
        center: bool = False,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        q_low, q_high = (float(q) for q in quantiles)
        if not 0.0 <= q_low < q_high <= 1.0:
            raise ValueError(
                f"PercentileValueNorm: quantiles must satisfy 0 <= low < high <= 1, got {quantiles}"
            )
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"PercentileValueNorm: rate must lie in (0, 1], got {rate}")
        if min_scale < 0:
            raise ValueError(f"PercentileValueNorm: min_scale must be >= 0, got {min_scale}")
        self.quantiles = (q_low, q_high)
        self.rate = float(rate)
        self.min_scale = float(min_scale)
        self.center = bool(center)
        self.register_buffer("low", torch.zeros(self.shape, dtype=torch.float64, device=device))
        self.register_buffer("high", torch.zeros(self.shape, dtype=torch.float64, device=device))

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Moves ``low``/``high`` towards the batch's quantiles (over every leading dim)."""
        batch = self._batch(value_target).to(self.low.device)
        if batch.shape[0] == 0:
            return
        q = torch.tensor(self.quantiles, dtype=batch.dtype, device=batch.device)
        q_low, q_high = torch.quantile(batch, q, dim=0)
        self.low.lerp_(q_low, self.rate)
        self.high.lerp_(q_high, self.rate)

    def loc(self) -> torch.Tensor:
        loc = self.low if self.center else torch.zeros_like(self.low)
        return loc.to(torch.get_default_dtype())

    def scale(self) -> torch.Tensor:
        floor = max(self.min_scale, self.epsilon)
        return (self.high - self.low).clamp_min(floor).to(torch.get_default_dtype())

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, quantiles={self.quantiles}, rate={self.rate}, "
            f"min_scale={self.min_scale}, center={self.center}"
        )


# ------------------------------------------------------------------------------------------
# Invertible transforms
# ------------------------------------------------------------------------------------------


class ValueTransform(nn.Module):
    """Base class of invertible element-wise value transforms.

    :meth:`forward` maps raw values (rewards, returns) to the space a critic predicts in;
    :meth:`inverse` maps predictions back before they are used for bootstrapping. Subclasses
    implement both.

    Examples:
        >>> class Double(ValueTransform):
        ...     def forward(self, value):
        ...         return value * 2
        ...     def inverse(self, value):
        ...         return value / 2
        >>> Double().inverse(Double()(torch.tensor([1.0, -3.0])))
        tensor([ 1., -3.])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Maps raw values to the transformed space."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Maps transformed values back to raw values."""
        raise NotImplementedError(f"{type(self).__name__} does not implement inverse()")


class IdentityValueTransform(ValueTransform):
    """Leaves values unchanged (both ways).

    Examples:
        >>> IdentityValueTransform()(torch.tensor([-1.0, 2.0]))
        tensor([-1.,  2.])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Returns ``value``."""
        return value

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Returns ``value``."""
        return value


class SymLogValueTransform(ValueTransform):
    """:func:`~torchrl.modules.functional.symlog` forward, ``symexp`` inverse (DreamerV3).

    Examples:
        >>> t = SymLogValueTransform()
        >>> t(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-4.6151,  0.0000,  4.6151])
        >>> t.inverse(t(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Applies ``symlog``."""
        return F.symlog(value)

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Applies ``symexp``."""
        return F.symexp(value)


class SignedHyperbolicValueTransform(ValueTransform):
    """``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` forward, its closed-form inverse back.

    Args:
        epsilon: weight of the linear term (``> 0``; default ``1e-3``).

    Examples:
        >>> t = SignedHyperbolicValueTransform(epsilon=1e-3)
        >>> t(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-9.1499,  0.0000,  9.1499])
        >>> t.inverse(t(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """

    def __init__(self, epsilon: float = 1e-3) -> None:
        super().__init__()
        if epsilon <= 0:
            raise ValueError(f"SignedHyperbolicValueTransform: epsilon must be > 0, got {epsilon}")
        self.epsilon = float(epsilon)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Applies :func:`~torchrl.modules.functional.signed_hyperbolic`."""
        return F.signed_hyperbolic(value, self.epsilon)

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Applies :func:`~torchrl.modules.functional.signed_parabolic`."""
        return F.signed_parabolic(value, self.epsilon)

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}"


class ComposeValueTransform(ValueTransform):
    """Chains transforms: forward in the given order, inverse in reverse order.

    Args:
        *transforms: the :class:`ValueTransform` s to chain.

    Examples:
        >>> t = ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform())
        >>> t(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-2.3175,  0.0000,  2.3175])
        >>> t.inverse(t(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """

    def __init__(self, *transforms: ValueTransform) -> None:
        super().__init__()
        for t in transforms:
            if not isinstance(t, ValueTransform):
                raise TypeError(
                    f"ComposeValueTransform takes ValueTransform instances, got {type(t).__name__}"
                )
        self.transforms = nn.ModuleList(transforms)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Applies each transform in order."""
        for t in self.transforms:
            value = t(value)
        return value

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Applies each inverse in reverse order."""
        for t in reversed(self.transforms):
            value = t.inverse(value)  # type: ignore[operator]
        return value


# ------------------------------------------------------------------------------------------
# Between real values and the critic's prediction space
# ------------------------------------------------------------------------------------------


def encode_value(
    value: torch.Tensor,
    value_norm: ValueNorm | None = None,
    value_transform: ValueTransform | None = None,
    *,
    update: bool = False,
) -> torch.Tensor:
    """Maps real values to the critic's prediction space: ``value_norm(value_transform(v))``.

    Args:
        value: real values ``[*B, *shape]``.
        value_norm: the normaliser (skipped when ``None``).
        value_transform: the transform applied first (skipped when ``None``).
        update: fold the transformed values into ``value_norm``'s statistics first (what a
            loss does with its value targets in training mode).

    Returns:
        The encoded values, same shape.

    Examples:
        >>> vn = RunningValueNorm()
        >>> encode_value(torch.tensor([[1.0], [3.0]]), vn, update=True)
        tensor([[-1.0000],
                [ 1.0000]])
    """
    if value_transform is not None:
        value = value_transform(value)
    if value_norm is not None:
        if update:
            value_norm.update(value)
        value = value_norm.normalize(value)
    return value


def decode_value(
    prediction: torch.Tensor,
    value_norm: ValueNorm | None = None,
    value_transform: ValueTransform | None = None,
) -> torch.Tensor:
    """Inverse of :func:`encode_value`: ``value_transform.inverse(value_norm.denormalize(p))``.

    Args:
        prediction: values in the critic's prediction space.
        value_norm: the normaliser (skipped when ``None``).
        value_transform: the transform (skipped when ``None``).

    Returns:
        Real values, same shape.

    Examples:
        >>> decode_value(torch.tensor([0.0, 1.0]), None, SymLogValueTransform())
        tensor([0.0000, 1.7183])
    """
    if value_norm is not None:
        prediction = value_norm.denormalize(prediction)
    if value_transform is not None:
        prediction = value_transform.inverse(prediction)
    return prediction


class DecodedValueOperator(TensorDictModuleBase):
    """Runs a critic that predicts in normalised/transformed space and writes real values.

    The critic's output at ``value_key`` ``p`` is replaced by
    ``value_transform.inverse(value_norm.denormalize(p))``. This is what value estimators (GAE,
    TD) must call when the critic is trained on scaled targets; the on-policy losses build one
    themselves when given ``value_norm``/``value_transform``. The critic is held, not copied.

    Args:
        critic: the tensordict module writing the prediction at ``value_key``.
        value_norm: the normaliser the critic's targets went through (or ``None``).
        value_transform: the transform applied before normalisation (or ``None``).
        value_key: the entry the critic writes (default ``"state_value"``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import ValueOperator
        >>> critic = ValueOperator(nn.Linear(3, 1))
        >>> vn = RunningValueNorm()
        >>> vn.update(torch.tensor([[100.0], [300.0]]))
        >>> td = TensorDict({"observation": torch.randn(5, 3)}, [5])
        >>> p = critic(td.clone())["state_value"]
        >>> real = DecodedValueOperator(critic, value_norm=vn)(td)["state_value"]
        >>> torch.allclose(real, p * 100.0 + 200.0)
        True
    """

    def __init__(
        self,
        critic: TensorDictModuleBase,
        *,
        value_norm: ValueNorm | None = None,
        value_transform: ValueTransform | None = None,
        value_key: NestedKey = STATE_VALUE,
    ) -> None:
        super().__init__()
        self.critic = critic
        self.value_norm = value_norm
        self.value_transform = value_transform
        self.value_key = value_key
        self.in_keys = list(critic.in_keys)
        self.out_keys = list(critic.out_keys)

    def decode(self, prediction: torch.Tensor) -> torch.Tensor:
        """Maps a prediction to a real value (see :func:`decode_value`)."""
        return decode_value(prediction, self.value_norm, self.value_transform)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Runs the critic on ``tensordict`` and replaces its value entry by the real value."""
        out = self.critic(tensordict)
        out.set(self.value_key, self.decode(out.get(self.value_key)))
        return out
