"""Multi-agent networks: one network per agent (or one shared), vmapped over the agent dimension."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl.modules.models.conv import ConvNet
from torchrl.modules.models.mlp import MLP


def _has_lazy(module: nn.Module) -> bool:
    return any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())


def _stack_into(template: nn.Module, nets: Sequence[nn.Module]) -> None:
    """Replaces every parameter/buffer of ``template`` by the stack of the same tensor of ``nets``."""
    for name, _ in list(template.named_parameters()):
        owner_name, _, leaf = name.rpartition(".")
        owner = template.get_submodule(owner_name)
        stacked = torch.stack([net.get_parameter(name).detach() for net in nets])
        setattr(owner, leaf, nn.Parameter(stacked))
    for name, _ in list(template.named_buffers()):
        owner_name, _, leaf = name.rpartition(".")
        owner = template.get_submodule(owner_name)
        owner.register_buffer(leaf, torch.stack([net.get_buffer(name) for net in nets]))


class MultiAgentNetBase(nn.Module):
    """Applies one network per agent along the agent dimension of the input.

    Subclasses give ``_build_single_net()`` (the network of one agent) and ``_event_ndims``
    (the number of per-agent input dims: 1 for vectors, 3 for images). Inputs are
    ``[*B, n_agents, *event]``; outputs are ``[*B, n_agents, features]``.

    * ``share_params=False``: each agent has its own parameters, stored stacked
      (``[n_agents, *shape]``) and applied with ``torch.vmap`` + ``torch.func.functional_call``;
      one kernel per layer for all agents instead of a Python loop.
    * ``centralized=True``: every agent's network sees the inputs of all agents (concatenated).
      Centralised *and* shared gives a single output, repeated for every agent.

    Lazy input sizes are materialised on the first call (build optimisers after it, as with
    ``torch.nn.LazyLinear``).

    Args:
        n_agents: number of agents.
        centralized: whether each agent sees all agents' inputs.
        share_params: whether all agents use the same parameters.
        device: device of the parameters.

    Examples:
        One linear layer per agent (subclasses write ``_build_single_net``):

        >>> import torch
        >>> class MultiAgentLinear(MultiAgentNetBase):
        ...     def __init__(self, n_agents, out_features):
        ...         super().__init__(n_agents=n_agents, centralized=False, share_params=False)
        ...         self.out_features = out_features
        ...     def _build_single_net(self):
        ...         return torch.nn.LazyLinear(self.out_features)
        >>> net = MultiAgentLinear(n_agents=3, out_features=2)
        >>> net(torch.randn(5, 3, 4)).shape  # [*B, n_agents, features]
        torch.Size([5, 3, 2])
    """

    _event_ndims: int = 1

    def __init__(
        self,
        *,
        n_agents: int,
        centralized: bool | None,
        share_params: bool | None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        if centralized is None or share_params is None:
            raise TypeError(
                f"{type(self).__name__} needs centralized=True/False and share_params=True/False"
            )
        if n_agents < 1:
            raise ValueError(f"n_agents must be positive, got {n_agents}")
        self.n_agents = n_agents
        self.centralized = centralized
        self.share_params = share_params
        self.device = device
        self.agent_net: nn.Module | None = None
        self._bmm_ok: bool | None = None

    def _build_single_net(self) -> nn.Module:
        raise NotImplementedError

    def _materialize(self, value: torch.Tensor | None) -> None:
        n_nets = 1 if self.share_params else self.n_agents
        nets = [self._build_single_net() for _ in range(n_nets)]
        if _has_lazy(nets[0]):
            if value is None:
                return
            with torch.no_grad():
                sample = value if self.centralized else value.select(-self._event_ndims - 1, 0)
                for net in nets:
                    net(sample)
        if self.share_params:
            self.agent_net = nets[0]
            return
        template = copy.deepcopy(nets[0])
        _stack_into(template, nets)
        self.agent_net = template

    def _call_one(
        self,
        params: Mapping[str, torch.Tensor],
        buffers: Mapping[str, torch.Tensor],
        value: torch.Tensor,
    ) -> torch.Tensor:
        assert self.agent_net is not None
        return torch.func.functional_call(self.agent_net, (dict(params), dict(buffers)), (value,))

    def _prepare_input(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not inputs:
            raise TypeError(f"{type(self).__name__} needs at least one input")
        return inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        value = self._prepare_input(*inputs)
        k = self._event_ndims
        if value.ndim < k + 1 or value.shape[-k - 1] != self.n_agents:
            raise ValueError(
                f"{type(self).__name__} expects inputs [*B, n_agents={self.n_agents}, "
                f"<{k} event dims>], got shape {tuple(value.shape)}"
            )
        if self.centralized:
            # Merge the agent dim with the first event dim: every agent sees all inputs.
            value = value.flatten(-k - 1, -k)
        if self.agent_net is None:
            self._materialize(value)
        net = self.agent_net
        assert net is not None
        if self.share_params:
            out = net(value)
            if self.centralized:
                out = out.unsqueeze(-2).expand(*out.shape[:-1], self.n_agents, out.shape[-1])
            return out
        if self._use_bmm():
            return self._forward_bmm(value)
        params = dict(net.named_parameters())
        buffers = dict(net.named_buffers())
        in_dim = None if self.centralized else -k - 1
        return torch.vmap(self._call_one, in_dims=(0, 0, in_dim), out_dims=-2)(
            params, buffers, value
        )

    def _use_bmm(self) -> bool:
        """Whether the stacked net is Linear layers plus parameter-free elementwise layers."""
        if self._bmm_ok is None:
            plain = self._event_ndims == 1 and getattr(self.agent_net, "_out_shape", None) is None
            net = self.agent_net
            layers = list(net.children()) if plain and net is not None else []
            self._bmm_ok = bool(layers) and all(
                isinstance(m, nn.Linear)
                or not (any(True for _ in m.parameters()) or any(True for _ in m.buffers()))
                for m in layers
            )
        return self._bmm_ok

    def _forward_bmm(self, value: torch.Tensor) -> torch.Tensor:
        # One batched matmul per layer for all agents: [A, N, F] @ [A, F, F'] (same maths as the
        # vmapped functional call, several times cheaper for small MLPs).
        batch = value.shape[:-1] if self.centralized else value.shape[:-2]
        n = batch.numel()
        if self.centralized:
            x = value.reshape(1, n, value.shape[-1]).expand(self.n_agents, n, value.shape[-1])
        else:
            x = value.reshape(n, self.n_agents, value.shape[-1]).transpose(0, 1)
        for layer in self.agent_net.children():  # type: ignore[union-attr]
            if isinstance(layer, nn.Linear):
                weight = layer.weight.transpose(-1, -2)
                if layer.bias is None:
                    x = torch.bmm(x, weight)
                else:
                    x = torch.baddbmm(layer.bias.unsqueeze(-2), x, weight)
            else:
                x = layer(x)
        return x.transpose(0, 1).reshape(*batch, self.n_agents, x.shape[-1])


class MultiAgentMLP(MultiAgentNetBase):
    """An :class:`MLP` per agent: ``[*B, n_agents, n_agent_inputs] -> [*B, n_agents, n_agent_outputs]``.

    Args:
        n_agent_inputs: per-agent input size, or ``None`` to infer it on the first call.
        n_agent_outputs: per-agent output size.
        n_agents: number of agents.
        centralized: each agent's MLP sees all agents' inputs (a centralised critic).
        share_params: one set of parameters for all agents.
        device: device of the parameters.
        depth: MLP depth (see :class:`MLP`).
        num_cells: MLP hidden sizes.
        activation_class: MLP activation.
        **kwargs: other :class:`MLP` arguments.

    Examples:
        >>> policy = MultiAgentMLP(4, 2, n_agents=3, centralized=False, share_params=False, depth=1)
        >>> policy(torch.zeros(10, 3, 4)).shape
        torch.Size([10, 3, 2])
        >>> critic = MultiAgentMLP(4, 1, n_agents=3, centralized=True, share_params=True)
        >>> critic(torch.zeros(10, 3, 4)).shape
        torch.Size([10, 3, 1])
    """

    _event_ndims = 1

    def __init__(
        self,
        n_agent_inputs: int | None,
        n_agent_outputs: int,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        device: DeviceLike = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        activation_class: Callable[..., nn.Module] = nn.Tanh,
        **kwargs: object,
    ) -> None:
        super().__init__(
            n_agents=n_agents, centralized=centralized, share_params=share_params, device=device
        )
        self.n_agent_inputs = n_agent_inputs
        self.n_agent_outputs = n_agent_outputs
        self._mlp_kwargs = {
            "depth": depth,
            "num_cells": num_cells,
            "activation_class": activation_class,
            **kwargs,
        }
        if n_agent_inputs is not None:
            self._materialize(None)

    def _build_single_net(self) -> nn.Module:
        n_in = None
        if self.n_agent_inputs is not None:
            n_in = self.n_agent_inputs * (self.n_agents if self.centralized else 1)
        return MLP(
            in_features=n_in,
            out_features=self.n_agent_outputs,
            device=self.device,
            **self._mlp_kwargs,  # type: ignore[arg-type]
        )


class MultiAgentConvNet(MultiAgentNetBase):
    """A :class:`ConvNet` per agent: ``[*B, n_agents, C, H, W] -> [*B, n_agents, features]``.

    Centralised networks stack all agents' channels (``n_agents * C`` input channels).

    Args:
        n_agents: number of agents.
        centralized: each agent's network sees all agents' images.
        share_params: one set of parameters for all agents.
        in_features: per-agent input channels, or ``None`` to infer them on the first call.
        device: device of the parameters.
        num_cells: channels per convolution (see :class:`ConvNet`).
        kernel_sizes: kernel sizes.
        strides: strides.
        paddings: paddings.
        activation_class: activation after each convolution.
        **kwargs: other :class:`ConvNet` arguments.

    Examples:
        >>> net = MultiAgentConvNet(2, centralized=False, share_params=False, num_cells=[4])
        >>> net(torch.zeros(5, 2, 3, 8, 8)).shape
        torch.Size([5, 2, 144])
    """

    _event_ndims = 3

    def __init__(
        self,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        *,
        in_features: int | None = None,
        device: DeviceLike = None,
        num_cells: Sequence[int] | int | None = None,
        kernel_sizes: Sequence[int] | int = 3,
        strides: Sequence[int] | int = 1,
        paddings: Sequence[int] | int = 0,
        activation_class: Callable[..., nn.Module] = nn.ELU,
        **kwargs: object,
    ) -> None:
        super().__init__(
            n_agents=n_agents, centralized=centralized, share_params=share_params, device=device
        )
        self.in_features = in_features
        self._conv_kwargs = {
            "num_cells": num_cells,
            "kernel_sizes": kernel_sizes,
            "strides": strides,
            "paddings": paddings,
            "activation_class": activation_class,
            **kwargs,
        }
        if in_features is not None:
            self._materialize(None)

    def _prepare_input(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != 1:
            raise TypeError(f"MultiAgentConvNet takes one input, got {len(inputs)}")
        return inputs[0]

    def _build_single_net(self) -> nn.Module:
        n_in = None
        if self.in_features is not None:
            n_in = self.in_features * (self.n_agents if self.centralized else 1)
        return ConvNet(in_features=n_in, device=self.device, **self._conv_kwargs)  # type: ignore[arg-type]
