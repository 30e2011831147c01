"""Multi-layer perceptron."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module_globals

from torchrl._types import DeviceLike
from torchrl.modules.models.noisy import NoisyLazyLinear, NoisyLinear
from torchrl.modules.models.utils import (
    ScalarBias,
    create_on_device,
    find_depth,
    per_layer,
)

_DEFAULT_NUM_CELLS = 32
_DEFAULT_DEPTH = 3

# Layer classes whose input size can be read from the first input.
LAZY_LAYERS: dict[type, type] = {nn.Linear: nn.LazyLinear, NoisyLinear: NoisyLazyLinear}

# Activations whose module call is only this function of the input (no state, no options).
_PLAIN_ACTIVATIONS: dict[type, Callable[[torch.Tensor], torch.Tensor]] = {
    nn.Tanh: torch.tanh,
    nn.Sigmoid: torch.sigmoid,
}


_linear = nn.functional.linear


def no_global_hooks() -> bool:
    """Whether no global module hook (``register_module_forward_hook`` & co.) is set.

    With :func:`plain_call`, what lets a fast path call a layer's function instead of the
    layer (the MLP here, the conv encoder/decoder of :mod:`~torchrl.modules.models.model_based`).

    Returns:
        ``True`` when calling a module runs no global hook.

    Examples:
        >>> no_global_hooks()
        True
    """
    g = _module_globals
    return not (
        g._global_forward_hooks
        or g._global_forward_pre_hooks
        or g._global_backward_hooks
        or g._global_backward_pre_hooks
    )


def plain_call(layer: nn.Module) -> bool:
    """Whether calling ``layer`` is only its class's ``forward`` (no hooks, no own forward).

    Args:
        layer: a module.

    Returns:
        ``True`` when ``layer(x)`` runs nothing but ``type(layer).forward``.

    Examples:
        >>> layer = nn.Linear(2, 2)
        >>> plain_call(layer)
        True
        >>> _ = layer.register_forward_hook(lambda module, args, out: out)
        >>> plain_call(layer)
        False
    """
    return not (
        layer._forward_hooks
        or layer._forward_pre_hooks
        or layer._backward_hooks
        or layer._backward_pre_hooks
        or "forward" in layer.__dict__
    )


def _make_layer(
    layer_class: Callable[..., nn.Module],
    in_features: int | None,
    out_features: int,
    bias: bool,
    layer_kwargs: dict[str, Any],
    device: DeviceLike,
) -> nn.Module:
    if in_features is None:
        lazy = LAZY_LAYERS.get(layer_class)  # type: ignore[call-overload]
        if lazy is None:
            raise ValueError(
                f"in_features=None needs a lazy version of {layer_class}; known: "
                f"{[c.__name__ for c in LAZY_LAYERS]}. Pass in_features explicitly."
            )
        return create_on_device(lazy, device, out_features, bias=bias, **layer_kwargs)
    return create_on_device(
        layer_class, device, in_features, out_features, bias=bias, **layer_kwargs
    )


class MLP(nn.Sequential):
    """A multi-layer perceptron; several inputs are concatenated along the last dimension.

    ``depth`` hidden layers of ``num_cells`` units each, then an output layer. With
    ``in_features=None`` the first layer is lazy and reads its size from the first input. With a
    tuple ``out_features`` the output is reshaped to it (``[*B, *out_features]``). Calling
    ``mlp(obs, action)`` concatenates the inputs, which makes Q-value networks one-liners.

    Args:
        in_features: input size, or ``None`` for a lazy first layer.
        out_features: output size, an int or a shape.
        depth: number of hidden layers (0 gives a single linear layer). Inferred from
            ``num_cells`` when it is a sequence; 3 otherwise.
        num_cells: hidden sizes: an int for every layer, or one per layer. Defaults to 32.
        activation_class: activation after each hidden layer.
        activation_kwargs: its kwargs, one dict for all layers or one per layer.
        norm_class: optional normalisation after each hidden linear layer (before activation).
        norm_kwargs: its kwargs, one dict or one per layer.
        dropout: dropout probability after each activation, or ``None``.
        bias_last_layer: whether the output layer has a bias.
        single_bias_last_layer: use one scalar bias shared by all outputs instead.
        layer_class: linear layer class (e.g. :class:`NoisyLinear`).
        layer_kwargs: extra kwargs of every linear layer.
        activate_last_layer: also apply the activation (and norm/dropout) after the output layer.
        device: device of the parameters.

    Examples:
        >>> mlp = MLP(in_features=4, out_features=2, num_cells=[32, 32])
        >>> mlp(torch.zeros(10, 4)).shape
        torch.Size([10, 2])
        >>> q = MLP(out_features=1, depth=2, num_cells=16)  # lazy input size
        >>> q(torch.zeros(5, 3), torch.zeros(5, 1)).shape  # observation and action
        torch.Size([5, 1])
        >>> MLP(in_features=3, out_features=(2, 4), depth=1)(torch.zeros(3)).shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | Sequence[int] | torch.Size | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        activation_class: Callable[..., nn.Module] = nn.Tanh,
        activation_kwargs: dict | Sequence[dict] | None = None,
        norm_class: Callable[..., nn.Module] | None = None,
        norm_kwargs: dict | Sequence[dict] | None = None,
        dropout: float | None = None,
        bias_last_layer: bool = True,
        single_bias_last_layer: bool = False,
        layer_class: Callable[..., nn.Module] = nn.Linear,
        layer_kwargs: dict | None = None,
        activate_last_layer: bool = False,
        device: DeviceLike = None,
    ) -> None:
        if out_features is None:
            raise ValueError("MLP needs out_features (an int or a shape)")
        if isinstance(out_features, int):
            out_shape: torch.Size | None = None
            n_out = out_features
        else:
            out_shape = torch.Size(out_features)
            n_out = math.prod(out_shape)
        if num_cells is None:
            num_cells = _DEFAULT_NUM_CELLS
        if depth is None and isinstance(num_cells, int):
            depth = _DEFAULT_DEPTH
        depth = find_depth(depth, num_cells)
        cells = per_layer(num_cells, depth, "num_cells")
        # One extra entry for the output layer when it is activated too.
        n_act = depth + int(activate_last_layer)
        act_kwargs = per_layer(activation_kwargs or {}, n_act, "activation_kwargs")
        nrm_kwargs = per_layer(norm_kwargs or {}, n_act, "norm_kwargs")
        layer_kwargs = dict(layer_kwargs or {})

        layers: list[nn.Module] = []
        sizes_in: list[int | None] = [in_features, *cells]
        sizes_out = [*cells, n_out]
        for i, (n_in, n_o) in enumerate(zip(sizes_in, sizes_out)):
            last = i == depth
            bias = not last or (bias_last_layer and not single_bias_last_layer)
            layers.append(_make_layer(layer_class, n_in, n_o, bias, layer_kwargs, device))
            if last and single_bias_last_layer:
                layers.append(ScalarBias(device))
            if not last or activate_last_layer:
                if norm_class is not None:
                    layers.append(create_on_device(norm_class, device, **nrm_kwargs[i]))
                layers.append(create_on_device(activation_class, device, **act_kwargs[i]))
                if dropout:
                    layers.append(nn.Dropout(dropout))
        super().__init__(*layers)
        self.in_features = in_features
        self.out_features = out_features
        self.depth = depth
        self.num_cells = cells
        self._out_shape = out_shape

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not inputs:
            raise TypeError("MLP needs at least one input tensor")
        value = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        layers = self._modules.values()
        if no_global_hooks():
            # Without hooks, the module call of an exact nn.Linear or of a stateless
            # activation is only its function: calling that directly saves ~2 us a layer (a
            # third of a small layer's own cost on a CPU). The weights are read from the
            # layer's slots at each call, as nn.Linear.forward does. Layers with hooks or an
            # instance forward, and other layers (norms, dropout, subclasses), keep their
            # module call.
            for layer in layers:
                kind = type(layer)
                if kind is nn.Linear and plain_call(layer):
                    params = layer._parameters
                    value = _linear(value, params["weight"], params["bias"])  # type: ignore[arg-type]
                elif kind in _PLAIN_ACTIVATIONS and plain_call(layer):
                    value = _PLAIN_ACTIVATIONS[kind](value)
                else:
                    value = layer(value)
        else:
            for layer in layers:
                value = layer(value)
        if self._out_shape is not None:
            value = value.unflatten(-1, self._out_shape)
        return value


# One step of a planned call: (layer, index of its weight, index of its bias) for a linear
# layer, (layer, None, None) for an activation; indices into a flat tensor list.
MLPPlan = list[tuple[nn.Module, int | None, int | None]]


def mlp_plan(module: nn.Module, keys: Sequence[tuple[str, ...]]) -> MLPPlan | None:
    """How to call ``module``, an :class:`MLP`, on a flat list of tensors instead of its own.

    The plan lists the MLP's layers with the positions of their weight and bias among
    ``keys`` (the parameter paths of a flat tensor list, relative to ``module``, as
    :meth:`tensordict.TensorDict.from_module` names them). It exists when every layer is an
    exact ``nn.Linear`` or an activation that is only its function (``Tanh``, ``Sigmoid``)
    and the keys are exactly those layers' parameters; ``None`` otherwise. See
    :func:`planned_forward`.

    Args:
        module: the network (an ``MLP``, or its subclass that keeps ``MLP.forward``).
        keys: the paths of the tensors :func:`planned_forward` will get, in their order.

    Returns:
        The plan, or ``None``.

    Examples:
        >>> mlp = MLP(in_features=3, out_features=1, depth=1, num_cells=4)
        >>> [(type(layer).__name__, w, b) for layer, w, b in mlp_plan(mlp, [
        ...     ("0", "weight"), ("0", "bias"), ("2", "weight"), ("2", "bias")])]
        [('Linear', 0, 1), ('Tanh', None, None), ('Linear', 2, 3)]
        >>> mlp_plan(nn.Linear(3, 1), [("weight",), ("bias",)]) is None  # not an MLP
        True
    """
    if not isinstance(module, MLP) or type(module).forward is not MLP.forward:
        return None
    index = {tuple(key): i for i, key in enumerate(keys)}
    plan: MLPPlan = []
    for name, layer in module._modules.items():
        if type(layer) is nn.Linear:
            weight = index.pop((name, "weight"), None)
            if weight is None:
                return None
            plan.append((layer, weight, index.pop((name, "bias"), None)))
        elif type(layer) in _PLAIN_ACTIVATIONS:
            plan.append((layer, None, None))
        else:
            return None
    # Every tensor must belong to a linear layer (no buffers, nothing left over).
    return plan if not index and plan else None


def planned_forward(
    module: nn.Module, plan: MLPPlan, tensors: Sequence[torch.Tensor], *inputs: torch.Tensor
) -> torch.Tensor | None:
    """An MLP called with ``tensors`` as its parameters, or ``n`` copies of it at once.

    ``tensors`` are in the order of ``plan`` (:func:`mlp_plan`). One copy's tensors give what
    ``module`` computes with them in its slots (``torch.func.functional_call`` without the
    swap: a target network costs no parameter writes). Tensors stacked along a first dim of
    size ``n`` (3-d weights) give the ``n`` copies' outputs on the same inputs, one batched
    matmul per layer: what ``torch.vmap`` over the copies or a loop over them computes, in
    half the operations of a loop of two and without per-copy views of the stacked tensors
    (on a CPU, the twin critics of SAC or TD3 cost ~15% less this way). ``None`` when the MLP
    or a layer has hooks or a global module hook is set (the caller then calls the modules).

    Args:
        module: the MLP the plan was made for.
        plan: from :func:`mlp_plan`.
        tensors: the parameters (``[n, ...]`` each when stacked).
        *inputs: ``[*B, in]`` tensors, concatenated along the last dim as ``MLP`` does.

    Returns:
        The output ``[*B, *out]`` (``[n, *B, *out]`` when stacked), or ``None``.

    Examples:
        >>> mlp = MLP(in_features=3, out_features=2, depth=1, num_cells=4)
        >>> keys = [("0", "weight"), ("0", "bias"), ("2", "weight"), ("2", "bias")]
        >>> members = [MLP(in_features=3, out_features=2, depth=1, num_cells=4) for _ in range(3)]
        >>> params = [[dict(m.named_parameters())[".".join(k)] for k in keys] for m in members]
        >>> x = torch.randn(5, 3)
        >>> torch.equal(planned_forward(mlp, mlp_plan(mlp, keys), params[1], x), members[1](x))
        True
        >>> stacked = [torch.stack(column) for column in zip(*params)]
        >>> out = planned_forward(mlp, mlp_plan(mlp, keys), stacked, x)
        >>> out.shape
        torch.Size([3, 5, 2])
        >>> torch.allclose(out[1], members[1](x), atol=1e-6)
        True
    """
    if not (no_global_hooks() and plain_call(module)):
        return None
    value = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
    first_weight = next(w for _, w, _ in plan if w is not None)
    n = tensors[first_weight].shape[0] if tensors[first_weight].dim() == 3 else None
    batch = value.shape[:-1]
    if n is not None:
        value = value.reshape(-1, value.shape[-1])  # [N, in]
    for layer, weight, bias in plan:
        if not plain_call(layer):
            return None
        if weight is None:
            value = _PLAIN_ACTIVATIONS[type(layer)](value)
        elif n is None:
            value = _linear(value, tensors[weight], None if bias is None else tensors[bias])
        else:
            w = tensors[weight]
            if value.dim() == 2:
                # The shared input: one broadcast (stride 0) batch for every copy.
                value = value.expand(n, *value.shape)
            if bias is None:
                value = torch.bmm(value, w.mT)
            else:
                value = torch.baddbmm(tensors[bias].unsqueeze(-2), value, w.mT)
    if n is not None:
        value = value.reshape(n, *batch, value.shape[-1])
    out_shape = module._out_shape  # type: ignore[union-attr]
    return value if out_shape is None else value.unflatten(-1, out_shape)
