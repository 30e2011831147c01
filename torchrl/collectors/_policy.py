"""Policies inside collectors: wrapping plain modules, devices, and weights shared with workers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, skip_existing
from torch import nn

from torchrl._compile import maybe_compile
from torchrl._td_compat import entries, plain_module_call, set_unchecked
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import RandomPolicy
from torchrl.weight_update.weights import (
    WeightsLike,
    bind_weights,
    copy_weights,
    named_weights,
    share_weights,
)

#: A collector's policy: TensorDict in, TensorDict out (or written in place and ``None``).
PolicyLike = Callable[[TensorDictBase], "TensorDictBase | None"]

__all__ = [
    "PolicyLike",
    "WeightsLike",
    "DevicePolicy",
    "DirectModuleCall",
    "accelerate_in_place",
    "accelerated_policy",
    "bind_weights",
    "copy_weights",
    "device_of",
    "direct_call",
    "named_weights",
    "random_policy",
    "share_weights",
    "wrap_policy",
]


def random_policy(env: EnvBase) -> RandomPolicy:
    """The policy used when a collector is given none: uniform actions from the env's spec."""
    keys = env.action_keys
    if len(keys) == 1:
        return RandomPolicy(env.full_action_spec[keys[0]], action_key=keys[0])
    return RandomPolicy(env.full_action_spec)


def wrap_policy(policy: PolicyLike | None, env: EnvBase, trust_policy: bool) -> PolicyLike:
    """Makes ``policy`` a TensorDict-in, TensorDict-out callable.

    A ``TensorDictModuleBase`` is used as is. An ``nn.Module`` whose ``forward`` arguments are
    observation keys of the env (or that takes one argument when the env has one observation)
    is wrapped in a ``TensorDictModule`` writing the env's action keys. Any other callable is
    taken to map a TensorDict to a TensorDict (or to write into it and return ``None``).
    """
    if policy is None:
        return random_policy(env)
    if trust_policy or isinstance(policy, TensorDictModuleBase):
        return policy
    if not callable(policy):
        raise TypeError(f"collector: the policy must be callable, got {type(policy).__name__}")
    if isinstance(policy, nn.Module):
        try:
            params = list(inspect.signature(policy.forward).parameters.values())
        except (TypeError, ValueError):
            return policy
        names = [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        obs_keys = [k for k in env.observation_keys if isinstance(k, str)]
        in_keys: list[Any] = list(names)
        out_keys: list[Any] = list(env.action_keys)
        if names and all(n in obs_keys for n in names):
            return TensorDictModule(policy, in_keys=in_keys, out_keys=out_keys)
        single = len(env.observation_keys) == 1
        if len(names) == 1 and single and names[0] not in ("tensordict", "td"):
            return TensorDictModule(policy, in_keys=list(env.observation_keys), out_keys=out_keys)
    return policy


def device_of(policy: object) -> torch.device | None:
    """The device of the policy's first parameter or buffer (``None`` when it has none)."""
    if not isinstance(policy, nn.Module):
        return None
    for param in policy.parameters():
        return param.device
    for buffer in policy.buffers():
        return buffer.device
    return None


class DevicePolicy:
    """Runs a policy on another device than the env's, moving data there and back.

    Args:
        policy: the policy (its parameters on ``device``).
        device: the policy's device.
        env_device: where the env's data lives.
    """

    def __init__(
        self, policy: PolicyLike, device: torch.device, env_device: torch.device | None
    ) -> None:
        self.policy = policy
        self.device = device
        self.env_device = env_device

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        moved = td.to(self.device)
        out = self.policy(moved)
        out = moved if out is None else out
        if self.env_device is not None:
            out = out.to(self.env_device)
        return td.update(out)


class DirectModuleCall:
    """Calls a plain ``TensorDictModule``'s network on a TensorDict's entries, nothing else.

    ``TensorDictModule.__call__`` spends several microseconds per call in generic machinery
    (module hooks, dispatch, key unravelling, error wrapping) that a collector calling the same
    module thousands of times with the same keys does not need. This reads the ``in_keys``
    from the TensorDict's dict, calls the network and writes the ``out_keys``; anything
    unusual (a missing key, another TensorDict class, ``skip_existing`` mode, outputs that are
    not tensors) goes through the module itself, so results are the same.

    A network that is a plain ``nn.Sequential`` (no hooks, no compiled call, ``__call__`` not
    overridden, anywhere in it) is run as the chain of its layers' ``forward`` methods, which
    is what ``nn.Module.__call__`` does without hooks, minus about a microsecond per layer;
    ``nn.Linear`` layers and plain activations as the torch functions their ``forward`` calls,
    with the parameters read once per batch. :meth:`refresh` re-reads the layers, parameters
    and hooks: the collector calls it before every batch.

    With ``wrap_net`` (a compiled or CUDA-graph call of the network, see
    :func:`accelerated_policy`), the network is called through ``wrap_net(network)``, made
    once per network object, instead of the layer chain.

    Args:
        module: a ``TensorDictModule`` accepted by :func:`direct_call`.
        wrap_net: maps the network to what is called in its place (``None``: the network).
    """

    def __init__(
        self,
        module: TensorDictModule,
        wrap_net: Callable[[nn.Module], Callable[..., Any]] | None = None,
    ) -> None:
        self.module = module
        self.net: Callable[..., Any] = module.module
        self.in_keys = list(module.in_keys)
        self.out_keys = list(module.out_keys)
        self.single = len(self.out_keys) == 1
        self.chain: list[Callable[[Any], Any]] | None = None
        self.wrap_net = wrap_net
        self._wrapped_of: nn.Module | None = None
        self.refresh()

    def refresh(self) -> None:
        """Re-reads the network's layers (a hook or a layer added since is then honoured)."""
        net = cast(nn.Module, self.module.module)
        if self.wrap_net is not None:
            # wrapped once per network object: a new wrapper would compile (or record) again
            if net is not self._wrapped_of:
                self.net = self.wrap_net(net)
                self._wrapped_of = net
            return
        self.net = net
        self.chain = _forward_chain(net) if len(self.in_keys) == 1 else None

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        if type(td) is not TensorDict or skip_existing():
            return self.module(td)
        raw = entries(td)
        try:
            args = [raw[key] for key in self.in_keys]
        except KeyError:
            return self.module(td)  # its error names the missing key
        chain = self.chain
        if chain is not None:
            out = args[0]
            for forward in chain:
                out = forward(out)
        else:
            out = self.net(*args)
        if self.single and type(out) is torch.Tensor:
            set_unchecked(td, self.out_keys[0], out, inplace=False, validated=False)
            return td
        if type(out) is not tuple:
            out = (out,)
        if isinstance(out[0], (dict, TensorDictBase)) and len(out) == 1:
            out = tuple(out[0].get(key) for key in self.out_keys)
        if len(out) != len(self.out_keys):
            raise RuntimeError(
                f"{type(self.net).__name__} returned {len(out)} outputs for out_keys "
                f"{self.out_keys}"
            )
        for key, value in zip(self.out_keys, out):
            td.set(key, value if type(value) is torch.Tensor else TensorDict.from_any(value))
        return td


def _plain_layer(module: Any) -> bool:
    """Whether calling ``module`` is exactly calling its ``forward`` (see ``nn.Module``)."""
    return (
        isinstance(module, nn.Module)
        and type(module).__call__ is nn.Module.__call__
        and module._compiled_call_impl is None
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and not module._backward_hooks
        and not module._backward_pre_hooks
    )


def _forward_chain(net: Any) -> list[Callable[[Any], Any]] | None:
    """The ``forward`` methods a plain ``nn.Sequential`` runs in turn (``None``: not plain)."""
    from torch.nn.modules import module as torch_module

    global_hooks = (
        torch_module._global_forward_hooks,
        torch_module._global_forward_pre_hooks,
        torch_module._global_backward_hooks,
        torch_module._global_backward_pre_hooks,
    )
    if any(global_hooks) or torch._C._get_tracing_state() is not None:
        return None
    if type(net) is not nn.Sequential or not _plain_layer(net):
        return None
    chain: list[Callable[[Any], Any]] = []
    for layer in net:
        if type(layer) is nn.Sequential:
            inner = _forward_chain(layer)
            if inner is None:
                return None
            chain += inner
        elif _plain_layer(layer):
            chain.append(_layer_call(layer))
        else:
            return None
    return chain


# Activations whose ``forward`` is exactly this torch function of the input.
_ACTIVATIONS: dict[type, Callable[[torch.Tensor], torch.Tensor]] = {
    nn.Tanh: torch.tanh,
    nn.Sigmoid: torch.sigmoid,
}


def _layer_call(layer: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """What calling a plain layer computes, with the least Python in between.

    ``nn.Linear.forward`` reads its weight and bias through ``nn.Module.__getattr__`` at every
    call (about 1.5 us of a 5 us call on a small batch): they are read here once, when the
    chain is (re)built before each batch. In-place updates of the parameters (optimizers,
    ``update_policy_weights_``, ``load_state_dict``, ``.to()``) keep the same objects and are
    seen; a parameter replaced by a new object is seen from the next batch on.
    """
    if type(layer) is nn.Linear:
        weight, bias = layer.weight, layer.bias
        linear = torch.nn.functional.linear

        def call(x: torch.Tensor) -> torch.Tensor:
            return linear(x, weight, bias)

        return call
    if type(layer) is nn.ReLU and not layer.inplace:
        return torch.relu
    return _ACTIVATIONS.get(type(layer), layer.forward)


def direct_call(policy: PolicyLike) -> PolicyLike:
    """A :class:`DirectModuleCall` for a plain ``TensorDictModule``, else ``policy`` itself.

    Plain means: exactly ``TensorDictModule``, string keys, positional inputs, in-place
    outputs, no ``method``, no hooks on the wrapper.
    """
    return DirectModuleCall(cast(TensorDictModule, policy)) if _plain_module(policy) else policy


def _plain_module(policy: object) -> bool:
    """Whether :func:`direct_call` may call ``policy``'s network itself."""
    if type(policy) is not TensorDictModule:
        return False
    keys = [*policy.in_keys, *policy.out_keys]
    return (
        all(type(k) is str and k != "_" for k in keys)
        and plain_module_call(policy)
        and isinstance(policy.module, nn.Module)
    )


class _NetCall:
    """Calls a network: a plain function for ``CudaGraphModule``'s tensor path (a network with
    an ``in_keys`` attribute would otherwise be taken for a TensorDict module)."""

    def __init__(self, net: Callable[..., Any]) -> None:
        self.net = net

    def __call__(self, *args: Any) -> Any:
        return self.net(*args)


def _cuda_graph(fn: Callable[..., Any], options: dict[str, Any], **keys: Any) -> Any:
    from tensordict.nn import CudaGraphModule

    return CudaGraphModule(fn, **keys, **options)


def accelerated_policy(
    policy: PolicyLike,
    compile_options: dict[str, Any] | None,
    cudagraph_options: dict[str, Any] | None,
    owner: str,
) -> PolicyLike:
    """What a collector calls in place of ``policy`` for ``compile_policy``/``cudagraph_policy``.

    A plain ``TensorDictModule`` (see :func:`direct_call`) keeps the direct call: only its
    network is compiled (:func:`~torchrl.maybe_compile`, which runs it eagerly with a
    warning if compilation fails) and/or recorded in a ``tensordict.nn.CudaGraphModule``, and
    the keys are read and written eagerly, so dynamo sees tensors only. Any other policy is
    compiled whole (TensorDict in, TensorDict out) and recorded with its ``in_keys`` and
    ``out_keys``. Compiled code reads the parameters at every call and a CUDA graph reads
    them where they were at recording: weights written into the parameters in place (what
    ``update_policy_weights_`` and the weight-sync schemes do) are seen by both.

    Args:
        policy: the TensorDict policy the collector runs (on its device).
        compile_options: ``torch.compile`` keywords (and ``"warmup"``), or ``None``.
        cudagraph_options: ``CudaGraphModule`` keywords (``"warmup"``, ``"device"``), or ``None``.
        owner: the collector's name, for messages.

    Returns:
        ``policy`` itself when both options are ``None``, else a TensorDict-in, TensorDict-out
        callable.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> call = accelerated_policy(policy, {"backend": "eager"}, None, "demo")
        >>> call(TensorDict(observation=torch.ones(2, 3), batch_size=[2]))["action"].shape
        torch.Size([2, 1])
    """
    if compile_options is None and cudagraph_options is None:
        return policy
    if _plain_module(policy):

        def wrap_net(net: nn.Module) -> Callable[..., Any]:
            call: Callable[..., Any] = maybe_compile(net, compile_options, owner=owner)
            if cudagraph_options is not None:
                call = _cuda_graph(_NetCall(call), cudagraph_options)
            return call

        return DirectModuleCall(cast(TensorDictModule, policy), wrap_net=wrap_net)
    call: Any = maybe_compile(policy, compile_options, owner=owner)
    if cudagraph_options is not None:
        in_keys = getattr(policy, "in_keys", None)
        out_keys = getattr(policy, "out_keys", None)
        if in_keys is None or out_keys is None:
            raise TypeError(
                f"{owner}: cudagraph_policy needs a policy with in_keys and out_keys (a "
                f"TensorDictModuleBase), got {type(policy).__name__}"
            )
        call = _cuda_graph(call, cudagraph_options, in_keys=list(in_keys), out_keys=list(out_keys))
    return cast(PolicyLike, call)


class _GraphPerShape:
    """One ``CudaGraphModule`` per input shape, made at the first call with that shape.

    A CUDA graph replays fixed shapes; a policy served to batches of varying size (an
    inference server) gets a graph per batch size (at most ``max_batch_size`` of them).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        options: dict[str, Any],
        in_keys: list[Any] | None,
        out_keys: list[Any] | None,
    ) -> None:
        self.fn = fn
        self.options = options
        self.keys = {} if in_keys is None else {"in_keys": in_keys, "out_keys": out_keys}
        self.graphs: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *args: Any) -> Any:
        shape = tuple(
            tuple(a.batch_size) if isinstance(a, TensorDictBase) else tuple(getattr(a, "shape", ()))
            for a in args
        )
        graph = self.graphs.get(shape)
        if graph is None:
            fn = self.fn if self.keys else _NetCall(self.fn)
            graph = self.graphs[shape] = _cuda_graph(fn, self.options, **self.keys)
        return graph(*args)


def accelerate_in_place(
    module: nn.Module,
    compile_options: dict[str, Any] | None,
    cudagraph_options: dict[str, Any] | None,
    owner: str,
) -> nn.Module:
    """Compiles and/or records a served policy's ``forward`` in place (for inference servers).

    A server keeps the module itself (it writes new weights into it in place), so the
    compiled call replaces the instance's ``forward``: ``module(td)`` runs it with the
    module's hooks, and the parameters and state-dict keys are unchanged. A plain
    ``TensorDictModule`` (see :func:`direct_call`) has its network's ``forward`` replaced
    (dynamo then sees tensors only). With ``cudagraph_options``, one CUDA graph is recorded
    per batch size. Apply it to a copy of the user's policy, never to the policy itself.

    Args:
        module: the policy (a copy the caller owns).
        compile_options: ``torch.compile`` keywords (and ``"warmup"``), or ``None``.
        cudagraph_options: ``CudaGraphModule`` keywords, or ``None``.
        owner: the collector's name, for messages.

    Returns:
        ``module`` itself.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> policy = accelerate_in_place(policy, {"backend": "eager"}, None, "demo")
        >>> policy(TensorDict(observation=torch.ones(2, 3), batch_size=[2]))["action"].shape
        torch.Size([2, 1])
        >>> sorted(policy.state_dict())
        ['module.bias', 'module.weight']
    """
    if compile_options is None and cudagraph_options is None:
        return module
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"{owner}: compile_policy and cudagraph_policy need an nn.Module policy, got "
            f"{type(module).__name__}"
        )
    target = cast(nn.Module, module.module) if _plain_module(module) else module
    call: Callable[..., Any] = maybe_compile(target.forward, compile_options, owner=owner)
    if cudagraph_options is not None:
        tensordict_in = target is module
        call = _GraphPerShape(
            call,
            cudagraph_options,
            list(getattr(module, "in_keys", [])) if tensordict_in else None,
            list(getattr(module, "out_keys", [])) if tensordict_in else None,
        )
    # an instance attribute, not a Module: nn.Module.__call__ finds it before the class's
    # forward; no parameter, buffer or state-dict entry changes
    object.__setattr__(target, "forward", call)
    return module
