"""``LossModule``: networks, target parameters, keys and the value estimator of a loss.

A loss holds its networks as ordinary sub-modules. ``convert_to_functional`` registers one and,
on request, makes

- **target parameters**: a detached copy of the network's tensors, held as buffers in a
  :class:`~tensordict.nn.TensorDictParams` at ``target_<name>_params`` (so ``parameters()``
  never yields them and ``state_dict()`` saves them), updated by
  :class:`~torchrl.objectives.SoftUpdate` / :class:`~torchrl.objectives.HardUpdate`;
- **ensembles** (``expand_dim=n``): ``n`` independently initialised copies whose tensors are
  stacked along a leading dim in ``<name>_params``; the module at ``<name>`` is then an empty
  template, called member-wise under :func:`torch.vmap`.

A loss calls a network with one of three parameter sets, named by
:class:`~torchrl.objectives.ParamSet` (online, target, detached):
:meth:`LossModule.network_tensors` returns them and :meth:`LossModule.using_tensors` runs a block
with them (the losses' ``_call_network`` and ``_call_ensemble`` build on both). The chosen
tensors are put into the module's parameter and buffer slots for the duration of the call and
the originals put back (:class:`~torchrl.objectives._params.TensorSlots`): a handful of dict
writes, several times cheaper than ``TensorDict.to_module`` on small networks. The swaps are
plain Python that ``torch.compile`` traces: a compiled loss (:meth:`LossModule.compile`) is one
graph, ensembles included.

Mixed precision (:meth:`LossModule.set_autocast`) wraps the ``forward`` of each network module
(the inner module of every ``TensorDictModule``) in :func:`torch.autocast` and casts its
outputs back to float32, so the loss arithmetic after the networks runs in float32.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictParams,
    interaction_type,
    set_interaction_type,
)
from torch import Tensor, nn

from torchrl._compile import compile_in_place
from torchrl._td_compat import new_unchecked, plain_entries, plain_module_call
from torchrl._types import NestedKey
from torchrl._utils import warn_once
from torchrl.objectives._params import ParamSet, TensorSlots
from torchrl.objectives.utils import ValueEstimators, default_value_kwargs
from torchrl.objectives.value.estimators import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    VTrace,
    next_key,
)

__all__ = [
    "AUTO_LOSS_MASK_KEYS",
    "RANDOM_MODULE_LIST",
    "LossModule",
    "ParamSet",
    "add_random_module",
    "next_key",
]

#: The dtypes ``set_autocast`` runs the networks in (their outputs are cast back to float32).
_LOW_PRECISION = (torch.bfloat16, torch.float16)

#: The validity masks ``loss_mask_key="auto"`` looks for (all found are ANDed): the padding mask
#: of sampled slices and the mask of positions whose next step is valid.
AUTO_LOSS_MASK_KEYS: tuple[NestedKey, ...] = (("collector", "mask"), "shifted_valid")

#: Module types whose forward draws random numbers: an ensemble holding one runs under
#: ``torch.vmap(randomness="different")``, others under ``randomness="error"``.
RANDOM_MODULE_LIST: list[type[nn.Module]] = [
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
]


def add_random_module(module: type[nn.Module]) -> None:
    """Registers a module type as random, for the ensembles' ``vmap`` (see ``RANDOM_MODULE_LIST``).

    Args:
        module: a module class whose forward samples (e.g. a custom dropout).

    Examples:
        >>> from torch import nn
        >>> from torchrl.objectives import RANDOM_MODULE_LIST, add_random_module
        >>> class MyNoise(nn.Module):
        ...     def forward(self, x):
        ...         return x + torch.randn_like(x)
        >>> add_random_module(MyNoise)
        >>> MyNoise in RANDOM_MODULE_LIST
        True
    """
    if not (isinstance(module, type) and issubclass(module, nn.Module)):
        raise TypeError(f"add_random_module takes an nn.Module subclass, got {module!r}")
    if module not in RANDOM_MODULE_LIST:
        RANDOM_MODULE_LIST.append(module)


def _vmap_randomness(module: nn.Module) -> str:
    random = tuple(RANDOM_MODULE_LIST)
    return "different" if any(isinstance(m, random) for m in module.modules()) else "error"


def _has_key(tensordict: TensorDictBase, key: NestedKey) -> bool | None:
    """Whether a plain ``TensorDict`` holds ``key`` (walked through its entry dicts, ~10x
    cheaper than ``key in td.keys(True)``); ``None`` when the walk does not apply (another
    TensorDict kind on the way, a key that is neither a string nor a tuple of strings, under
    tracing, where dynamo does not follow the entry dicts)."""
    if torch.compiler.is_compiling():
        return None
    entries = plain_entries(tensordict)
    return None if entries is None else _has_entry(entries, key)


def _has_entry(entries: Mapping[str, Any], key: NestedKey) -> bool | None:
    """:func:`_has_key` from a plain TensorDict's entry dict (``entries``), not traced."""
    if type(key) is str:
        return key in entries
    if type(key) is not tuple or not key:
        return None
    *parents, leaf = key
    node = entries
    for part in parents:
        if type(part) is not str:
            return None
        if part not in node:
            return False
        child = plain_entries(node[part])
        if child is None:  # another TensorDict kind (or a tensor) on the way
            return None
        node = child
    return leaf in node if type(leaf) is str else None


def _find_loss_mask(loss: LossModule, tensordict: TensorDictBase) -> torch.Tensor | None:
    """The AND of the loss's validity masks found in ``tensordict`` (``None``: none found)."""
    key = loss.loss_mask_key
    keys = AUTO_LOSS_MASK_KEYS if key == "auto" else () if key is None else (key,)
    mask = None
    for k in keys:
        value = None if _has_key(tensordict, k) is False else tensordict.get(k, None)
        if value is None:
            if key != "auto":
                raise KeyError(
                    f"{type(loss).__name__}: loss_mask_key {k!r} is not in the input; entries "
                    f"present: {sorted(map(str, tensordict.keys(True, True)))}"
                )
            continue
        batch = tensordict.batch_size
        if value.shape != batch and value.shape != (*batch, 1):
            raise ValueError(
                f"{type(loss).__name__}: the loss mask {k!r} has shape {tuple(value.shape)}, "
                f"expected the batch shape {tuple(batch)} (or with a trailing 1)"
            )
        value = value.reshape(batch).bool()
        mask = value if mask is None else mask & value
    return mask


def _apply_loss_mask(
    loss: LossModule, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The loss's arguments with the valid positions of its input selected (see
    ``loss_mask_key``); ``None`` when nothing is masked."""
    if loss._loss_mask_key is None or not args or not isinstance(args[0], TensorDictBase):
        return None
    tensordict = args[0]
    mask = _find_loss_mask(loss, tensordict)
    if mask is None or bool(mask.all()):
        return None
    advantage = getattr(loss.tensor_keys, "advantage", None)
    if tensordict.ndim > 1 and advantage is not None and advantage not in tensordict.keys(True):
        # Advantages run along time: compute them on the whole sequences, then select.
        with torch.no_grad():
            loss.value_estimator(tensordict)
    return (tensordict[mask], *args[1:]), kwargs


def _to_float32(out: Any) -> Any:
    """``out`` with its float16/bfloat16 tensors cast to float32 (tuples and lists walked)."""
    if isinstance(out, Tensor):
        return out.float() if out.dtype in _LOW_PRECISION else out
    if isinstance(out, (tuple, list)):
        return type(out)(_to_float32(o) for o in out)
    return out


def _device_type(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The device type of the first tensor input (else of the module's first parameter)."""
    for arg in itertools.chain(args, kwargs.values()):
        if isinstance(arg, Tensor):
            return arg.device.type
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device.type
    return "cpu"


class _AutocastForward:
    """Stands in for a network module's ``forward``: runs it under autocast, outputs float32.

    Set as the instance attribute ``forward`` (``nn.Module.__call__`` looks it up there first),
    so the module's hooks, state dict and parameter slots stay as they are; ``del
    module.forward`` restores the class's forward. One ``with`` block in one function: unlike a
    pre-hook entering the context and a post-hook leaving it, ``torch.compile`` can trace it.
    """

    def __init__(self, module: nn.Module, dtype: torch.dtype, device_type: str | None) -> None:
        self.module = module
        self.dtype = dtype
        self.device_type = device_type

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        device_type = self.device_type or _device_type(self.module, args, kwargs)
        with torch.autocast(device_type, dtype=self.dtype):
            out = type(self.module).forward(self.module, *args, **kwargs)
        return _to_float32(out)


def _autocast_targets(loss: nn.Module) -> list[nn.Module]:
    """The inner modules of the loss's ``TensorDictModule``\\ s (each once), in order."""
    seen: set[int] = set()
    targets = []
    for module in loss.modules():
        if not isinstance(module, TensorDictModule):
            continue
        inner = module.module
        if isinstance(inner, TensorDictModuleBase) or not isinstance(inner, nn.Module):
            continue
        if id(inner) not in seen:
            seen.add(id(inner))
            targets.append(inner)
    return targets


_DIRECT_FORWARDS: list[Any] = []


def _direct_forwards() -> list[Any]:
    """The ``forward`` functions that do nothing but read, call and write (see
    :func:`calls_network_directly`)."""
    if not _DIRECT_FORWARDS:
        # Imported on first use: torchrl.modules is not loaded with the objectives' base.
        from torchrl.modules.actors import Actor

        _DIRECT_FORWARDS.extend([TensorDictModule.forward, Actor.forward])
    return _DIRECT_FORWARDS


def calls_network_directly(module: nn.Module, out_keys: Sequence[NestedKey] | None = None) -> bool:
    """Whether the loss may call ``module``'s network itself instead of ``module(td)``.

    True for a ``TensorDictModule`` (an ``Actor`` without ``safe``, a ``ValueOperator``, the
    Q-network of a ``QValueActor``) that reads its ``in_keys`` positionally and writes one
    output computed by a linear layer or a sequence ending in one (an ``MLP``): for those,
    ``module(td)`` only reads the inputs, calls the network and writes its tensor, and its
    generic machinery (dispatch, the skip-existing check, output conversion) costs ~10 us
    per call, a third of a 2x64 MLP's own cost on a small batch. Anything else (hooks on the
    module, keyword inputs, a ``method``, several outputs, other networks) takes ``module(td)``.

    Args:
        module: a network wrapper held by a loss.
        out_keys: when given, the keys ``module`` must write (exactly these).

    Returns:
        Whether ``module.module(*network_inputs(module, td))`` computes what ``module(td)``
        writes at its only out-key.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import MLP, ValueOperator
        >>> calls_network_directly(ValueOperator(MLP(in_features=3, out_features=1)))
        True
        >>> calls_network_directly(nn.Linear(3, 1))  # not a TensorDictModule
        False
    """
    if not isinstance(module, TensorDictModule):
        return False
    forward = type(module).forward
    if forward is not TensorDictModule.forward:
        if forward not in _direct_forwards() or getattr(module, "safe", True):
            return False
    inner = module._modules.get("module")
    last = inner
    if isinstance(inner, nn.Sequential) and inner._modules:
        # The last layer, without Sequential.__getitem__'s index arithmetic.
        last = next(reversed(inner._modules.values()))
    if out_keys is not None and list(out_keys) != list(module.out_keys):
        return False
    return isinstance(last, nn.Linear) and len(module.out_keys) == 1 and plain_module_call(module)


def network_inputs(module: Any, tensordict: TensorDictBase) -> list[Tensor] | None:
    """The inputs ``module(tensordict)`` would pass its network, read at its ``in_keys``.

    Args:
        module: a ``TensorDictModule``.
        tensordict: the data.

    Returns:
        The tensors in ``in_keys`` order, or ``None`` when one is missing (the generic call
        then raises tensordict's error, or passes ``None`` where that is allowed).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import MLP, ValueOperator
        >>> critic = ValueOperator(MLP(in_features=3, out_features=1))
        >>> [x.shape for x in network_inputs(critic, TensorDict(observation=torch.zeros(2, 3)))]
        [torch.Size([2, 3])]
        >>> network_inputs(critic, TensorDict()) is None
        True
    """
    inputs = [tensordict.get(key, None) for key in module.in_keys]
    return None if any(value is None for value in inputs) else inputs


_NO_BATCH = torch.Size([])


def loss_output(terms: dict[str, Tensor]) -> TensorDictBase:
    """The TensorDict a loss returns (``batch_size=[]``) from its terms, all tensors.

    Built without the constructor's per-entry checks, which tensors under an empty batch
    size always pass (~1 us an entry on a CPU).

    Args:
        terms: the loss terms and diagnostics by name.

    Returns:
        A TensorDict holding them.

    Examples:
        >>> loss_output({"loss": torch.zeros(())}).batch_size
        torch.Size([])
    """
    if torch.compiler.is_compiling():
        # Traced, the checks cost nothing at run time (and dynamo knows the public
        # constructor).
        return TensorDict(terms, batch_size=[])
    return new_unchecked(terms, batch_size=_NO_BATCH)


def wrapped_network(module: nn.Module) -> nn.Module:
    """The network a ``TensorDictModule`` wraps (``module.module``), read from its module dict:
    the attribute goes through ``TensorDictModule.__getattr__`` (~1.5 us a read).

    Args:
        module: a ``TensorDictModule``.

    Returns:
        Its ``module``.

    Examples:
        >>> from torchrl.modules import ValueOperator
        >>> critic = ValueOperator(nn.Linear(3, 1))
        >>> wrapped_network(critic) is critic.module
        True
    """
    return cast(nn.Module, module._modules["module"])


def direct_call_inputs(
    module: Any, tensordict: TensorDictBase, out_keys: Sequence[NestedKey] | None = None
) -> list[Tensor] | None:
    """The inputs on which a loss may call ``module``'s network itself.

    Args:
        module: a network wrapper held by a loss.
        tensordict: the data to read the inputs from.
        out_keys: when given, the keys ``module`` must write (exactly these).

    Returns:
        The tensors at ``module.in_keys`` when :func:`calls_network_directly` holds, the
        out-keys match and every input is present (:func:`network_inputs`); ``None``
        otherwise, and the caller then calls ``module(td)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import MLP, ValueOperator
        >>> critic = ValueOperator(MLP(in_features=3, out_features=1))
        >>> td = TensorDict(observation=torch.zeros(2, 3))
        >>> len(direct_call_inputs(critic, td))
        1
        >>> direct_call_inputs(critic, td, ["another_value"]) is None
        True
    """
    if not calls_network_directly(module, out_keys):
        return None
    return network_inputs(module, tensordict)


def _plain_params(module: Any) -> bool:
    """Whether ``module(td)`` only reads, calls ``module.module`` and writes (any number of
    outputs): a ``TensorDictModule`` with tensordict's own ``forward`` and no extras."""
    return type(module).forward is TensorDictModule.forward and plain_module_call(module)


def actor_dist(
    actor: Any, tensordict: TensorDictBase, *, write: bool = True
) -> torch.distributions.Distribution:
    """``actor.get_dist(tensordict)``, with the parameter networks called directly when they
    are plain ``TensorDictModule``\\ s (same outputs written, same distribution).

    For a ``ProbabilisticActor`` whose parameter modules are all plain (see
    :func:`_plain_params`), each network is called on its inputs and its outputs are written
    at its ``out_keys``, under the sampler's default interaction type when none is set (as
    the actor's own call does); tensordict's generic module call (dispatch, skip-existing
    checks) costs ~25 us a call, a tenth of a small actor's forward on the CPU. Anything else
    takes ``actor.get_dist``.

    Args:
        actor: a probabilistic actor (anything with ``get_dist``).
        tensordict: its inputs; the distribution parameters are written there.
        write: ``False`` leaves ``tensordict`` as it is (the parameters go to a shallow copy,
            or with one plain parameter module straight from its network to the
            distribution, without a TensorDict in between).

    Returns:
        The actor's distribution on ``tensordict``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, TanhNormal
        >>> net = TensorDictModule(
        ...     nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...     ["observation"],
        ...     ["loc", "scale"],
        ... )
        >>> actor = ProbabilisticActor(net, ["loc", "scale"], distribution_class=TanhNormal)
        >>> td = TensorDict(observation=torch.zeros(5, 3), batch_size=[5])
        >>> actor_dist(actor, td).sample().shape
        torch.Size([5, 2])
    """
    fast = None
    # Traced, the generic call costs nothing at run time.
    if not torch.compiler.is_compiling() and isinstance(actor, nn.Module):
        if getattr(type(actor), "get_dist", None) is _probabilistic_get_dist():
            fast = actor.__dict__.get("_fast")
    if fast is None or not all(map(_plain_params, fast[0])):
        return actor.get_dist(tensordict if write else tensordict.copy())
    params, sampler = fast
    if not write:
        dist = _dist_from_network(params, sampler, tensordict)
        if dist is not None:
            return dist
        tensordict = tensordict.copy()
    with _default_interaction(sampler):
        _write_params(params, tensordict)
    return sampler.get_dist(tensordict)


def _default_interaction(sampler: Any) -> AbstractContextManager[Any]:
    """The sampler's default interaction type when none is set (what the actor's own call runs
    its parameter modules under, as tensordict's ``get_dist_params``)."""
    if interaction_type() is None:
        return set_interaction_type(sampler.default_interaction_type)
    return nullcontext()


def _write_params(params: Sequence[Any], tensordict: TensorDictBase) -> None:
    for module in params:
        inputs = network_inputs(module, tensordict)
        if inputs is None:  # a missing input: the module's own call raises its error
            module(tensordict)
            continue
        for key, tensor in _keyed_outputs(module, wrapped_network(module)(*inputs)):
            tensordict.set(key, tensor)


def _keyed_outputs(module: Any, out: Any) -> list[tuple[NestedKey, Any]]:
    """``(out_key, value)`` pairs of what ``module``'s network returned, as the module writes
    them (``"_"`` keys dropped, nested outputs as TensorDicts)."""
    tensors = _outputs(module, out)
    out_keys = module.out_keys
    if len(tensors) != len(out_keys):
        raise RuntimeError(
            f"{type(module.module).__name__} returned {len(tensors)} tensors for the "
            f"{len(out_keys)} out_keys {out_keys}"
        )
    return [
        (key, tensor if type(tensor) is Tensor else TensorDict.from_any(tensor))
        for key, tensor in zip(out_keys, tensors)
        if key != "_"
    ]


def _dist_from_network(
    params: Sequence[Any], sampler: Any, tensordict: TensorDictBase
) -> torch.distributions.Distribution | None:
    """The distribution of one plain parameter module's outputs, passed to the distribution
    class as ``sampler.get_dist`` would read them back (nothing written); ``None`` when that
    does not apply (several parameter modules, a parameter the module does not write, a
    sampler with its own ``get_dist``, a missing input): the caller writes them instead."""
    if len(params) != 1 or type(sampler).get_dist is not ProbabilisticTensorDictModule.get_dist:
        return None
    module = params[0]
    extra = sampler.distribution_kwargs
    if (extra is not None and type(extra) is not dict) or not all(
        k in module.out_keys for k in sampler.in_keys
    ):
        return None
    inputs = network_inputs(module, tensordict)
    if inputs is None:
        return None
    with _default_interaction(sampler):
        out = wrapped_network(module)(*inputs)
    produced = dict(_keyed_outputs(module, out))
    kwargs = {
        dist_key[-1] if isinstance(dist_key, tuple) else dist_key: produced[key]
        for dist_key, key in zip(sampler.dist_keys, sampler.in_keys)
    }
    return sampler.distribution_class(**kwargs, **(extra or {}))


def _outputs(module: Any, out: Any) -> tuple[Any, ...]:
    """A network's result as the tuple ``TensorDictModule`` writes (a dict or TensorDict
    holding every out key gives its values in ``out_keys`` order)."""
    if type(out) is Tensor:
        return (out,)
    if type(out) is tuple:
        return out
    if out is None:
        return ()
    if isinstance(out, (dict, TensorDictBase)) and all(k in out for k in module.out_keys):
        return tuple(out.get(k) for k in module.out_keys)
    return (out,)


_PROBABILISTIC_GET_DIST: list[Any] = []


def _probabilistic_get_dist() -> Any:
    """``ProbabilisticActor.get_dist`` (imported on first use, as in ``_direct_forwards``)."""
    if not _PROBABILISTIC_GET_DIST:
        from torchrl.modules.actors import ProbabilisticActor

        _PROBABILISTIC_GET_DIST.append(ProbabilisticActor.get_dist)
    return _PROBABILISTIC_GET_DIST[0]


_ESTIMATOR_CLASSES: dict[ValueEstimators, type[ValueEstimatorBase]] = {
    ValueEstimators.TD0: TD0Estimator,
    ValueEstimators.TD1: TD1Estimator,
    ValueEstimators.TDLambda: TDLambdaEstimator,
    ValueEstimators.GAE: GAE,
    ValueEstimators.VTrace: VTrace,
}


@dataclasses.dataclass
class _Network:
    """Bookkeeping of one converted network."""

    keys: list[tuple[str, ...]]
    slots: TensorSlots
    ensemble_size: int | None
    has_target: bool


class _Unregistered:
    """Holds a module without making it a sub-module (the estimator shares the loss's nets)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None

    def __deepcopy__(self, memo: dict) -> _Unregistered:
        out = _Unregistered()
        out.value = copy.deepcopy(self.value, memo)
        return out


class _LeavesCache(dict):
    """A dict that copies and pickles as empty: its lists point into the loss's own tensors."""

    def __deepcopy__(self, memo: dict) -> _LeavesCache:
        return _LeavesCache()

    def __reduce__(self) -> tuple:
        return (_LeavesCache, ())


def _lazy_names(module: nn.Module) -> list[str]:
    """The parameters and buffers of ``module`` that are still lazy (uninitialised)."""
    return [
        name
        for name, tensor in itertools.chain(module.named_parameters(), module.named_buffers())
        if isinstance(tensor, nn.parameter.UninitializedTensorMixin)  # type: ignore[attr-defined]
    ]


def _materialize_lazy_networks(
    loss: LossModule, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Forward pre-hook: runs each lazy network once on the first batch, then converts it."""
    data = args[0] if args else kwargs.get("tensordict")
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"{type(loss).__name__} holds networks with lazy parameters "
            f"({sorted(loss._pending_lazy)}): its first call must take a TensorDict, from which "
            f"they are initialised"
        )
    with torch.no_grad():
        for name, (module, expand_dim, target) in list(loss._pending_lazy.items()):
            if _lazy_names(module):
                module(data.copy())
            left = _lazy_names(module)
            if left:
                raise ValueError(
                    f"{type(loss).__name__}: running {name} on the first batch left lazy "
                    f"parameters {left} uninitialised"
                )
            del loss._pending_lazy[name]
            loss.convert_to_functional(module, name, expand_dim, target)
    if loss._lazy_hook is not None:
        loss._lazy_hook.remove()
        loss._lazy_hook = None


def _reset_parameters(module: nn.Module) -> bool:
    """Re-draws the initial weights of every sub-module that can; says whether any could."""
    reset = False
    for sub in module.modules():
        fn = getattr(sub, "reset_parameters", None)
        if callable(fn):
            fn()
            reset = True
    return reset


class LossModule(nn.Module):
    """Base of the losses: maps a TensorDict of data to a TensorDict of ``loss_*`` terms.

    Sum the ``loss_*`` entries for the backward pass; the other entries are detached
    diagnostics. Subclasses declare their keys in a nested ``_AcceptedKeys`` dataclass (see
    :meth:`set_keys`), register their networks with :meth:`convert_to_functional`, and list the
    value estimators they accept in ``_supported_estimators``. ``loss.compile(**kwargs)``
    compiles the loss in place (:meth:`compile`); :meth:`set_autocast` runs its networks in
    mixed precision while the losses, log-probabilities and targets stay float32.

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> loss.target_network_names
        ['value_network']
        >>> any("target" in name for name, _ in loss.named_parameters())
        False
        >>> _ = loss.set_keys(reward="r")
        >>> ("next", "r") in loss.in_keys
        True
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """No keys: subclasses declare theirs."""

    default_keys: Any = _AcceptedKeys
    default_value_estimator: ValueEstimators | None = None
    _supported_estimators: tuple[ValueEstimators, ...] = ()
    out_keys: list[Any] = []
    _tensor_keys: Any
    # Networks the losses register with convert_to_functional (typed for static checkers; at
    # run time they are ordinary sub-modules, or None where a loss has no such network).
    actor_network: TensorDictModuleBase
    critic_network: TensorDictModuleBase | None
    value_network: TensorDictModuleBase | None
    qvalue_network: TensorDictModuleBase
    local_value_network: TensorDictModuleBase
    mixer_network: TensorDictModuleBase

    def __init__(self) -> None:
        super().__init__()
        self._tensor_keys = self._AcceptedKeys()
        self._networks: dict[str, _Network] = {}
        # Flat leaf lists of the TensorDictParams (ensembles, targets): walking a nested
        # TensorDict costs ~50 us per call. Cleared whenever the tensors may be replaced.
        self._leaves_cache: dict[str, Any] = _LeavesCache()
        self._estimator = _Unregistered()
        self.value_type: ValueEstimators | None = None
        self.deactivate_vmap = False
        self.in_keys: list[NestedKey] = []
        self._required_keys: tuple[NestedKey, ...] = ()
        self._estimator_keys: tuple[NestedKey, ...] = ()
        # Networks with lazy parameters, converted on the first call (see convert_to_functional).
        self._pending_lazy: dict[str, tuple[nn.Module, int | None, bool]] = {}
        self._lazy_hook: Any = None
        self._loss_mask_key: NestedKey | None = "auto"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The loss mask selects the valid positions before the module call (its hooks and a
        # compiled call see the selection). Not a forward pre-hook: any hook puts every call
        # on nn.Module's slower hook path (~20 us), and the mask's data-dependent selection
        # stays out of a compiled graph.
        masked = _apply_loss_mask(self, args, kwargs)
        if masked is not None:
            args, kwargs = masked
        return super().__call__(*args, **kwargs)

    @property
    def loss_mask_key(self) -> NestedKey | None:
        """Which validity mask of the input selects the positions the loss averages over.

        ``"auto"`` (default): every entry of ``AUTO_LOSS_MASK_KEYS`` found in the input,
        ANDed; a key: that entry only (missing raises); ``None``: no masking. Masked positions
        are left out of the loss (selected out, not zero-weighted), so non-finite values there
        reach neither the loss nor the gradients. The selection flattens the batch; when the
        loss computes advantages itself, they are computed on the whole sequences first.
        """
        return self._loss_mask_key

    @loss_mask_key.setter
    def loss_mask_key(self, key: NestedKey | None) -> None:
        self._loss_mask_key = key

    @property
    def vmap_randomness(self) -> str:
        """``"different"`` when a network holds a module of ``RANDOM_MODULE_LIST``, else ``"error"``."""
        return _vmap_randomness(self)

    # ---- keys --------------------------------------------------------------------------------

    @property
    def tensor_keys(self) -> Any:
        """The keys in use, a dataclass (fields: see the loss's ``_AcceptedKeys``)."""
        return self._tensor_keys

    def set_keys(self, **kwargs: NestedKey | None) -> LossModule:
        """Renames the entries the loss reads or writes, e.g. ``loss.set_keys(reward="r")``.

        The value estimator's keys follow.

        Args:
            **kwargs: new keys by name (the fields of the loss's ``_AcceptedKeys``); ``None``
                leaves a key unchanged.

        Returns:
            The loss.
        """
        fields = {f.name for f in dataclasses.fields(self._tensor_keys)}
        for name, key in kwargs.items():
            if name not in fields:
                raise ValueError(
                    f"{type(self).__name__}.set_keys: unknown key name {name!r}; accepted: "
                    f"{sorted(fields)}"
                )
            if key is not None:
                setattr(self._tensor_keys, name, key)
        self._sync_estimator_keys()
        self._refresh_keys()
        return self

    def _refresh_keys(self) -> None:
        """Recomputes ``in_keys`` (and the keys checked by :meth:`_check_inputs`)."""
        self.in_keys = list(dict.fromkeys(self._compute_in_keys()))
        self._required_keys = tuple(dict.fromkeys(self._compute_required_keys()))
        self._estimator_keys = tuple(dict.fromkeys(self._compute_estimator_keys()))

    def _compute_in_keys(self) -> list[NestedKey]:
        return []

    def _compute_required_keys(self) -> list[NestedKey]:
        """The keys every call reads (default: all of ``in_keys``)."""
        return self._compute_in_keys()

    def _compute_estimator_keys(self) -> list[NestedKey]:
        """The keys read only to compute the advantage, when the data has none (default: none)."""
        return []

    def _adopt_out_key(self, field: str, network: Any) -> None:
        """Points key ``field`` at what ``network`` writes, unless it writes the default already.

        The last out key is used: a sequence (trunk -> head) writes its result last.
        """
        out_keys = list(getattr(network, "out_keys", None) or [])
        if out_keys and getattr(self._tensor_keys, field) not in out_keys:
            setattr(self._tensor_keys, field, out_keys[-1])

    def _net_in_keys(self, module: nn.Module | None, with_next: bool = True) -> list[NestedKey]:
        if module is None:
            return []
        keys = list(getattr(module, "in_keys", []))
        return keys + ([next_key(k) for k in keys] if with_next else [])

    def _check_inputs(
        self, tensordict: TensorDictBase, keys: Sequence[NestedKey] | None = None
    ) -> None:
        """Raises a ``KeyError`` naming the loss, the first missing key and the keys present.

        Every loss calls it once at the start of ``forward``: one membership test per key
        (``keys``, by default those the loss declares it always reads), nothing per element.

        Args:
            tensordict: the loss's input.
            keys: the keys to look for (default: the loss's required keys).
        """
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} takes a TensorDict (or tensors as keyword arguments), "
                f"got {type(tensordict).__name__}"
            )
        # The entry dicts are walked once per key (see _has_key), not under tracing.
        entries = None if torch.compiler.is_compiling() else plain_entries(tensordict)
        for key in self._required_keys if keys is None else keys:
            found = None if entries is None else _has_entry(entries, key)
            if found is None:
                found = key in tensordict.keys(include_nested=True)
            if not found:
                present = sorted(map(str, tensordict.keys(True, True)))
                raise KeyError(
                    f"{type(self).__name__}: the input tensordict has no entry {key!r} (rename "
                    f"the loss's keys with set_keys); entries present: {present}"
                )

    def _value_target_keys(self, critic: Any) -> list[NestedKey]:
        """What a TD-style estimator over ``critic`` reads: its inputs now and next, rewards, dones."""
        keys = self.tensor_keys
        return [
            *self._net_in_keys(critic),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _check_estimator_inputs(self, tensordict: TensorDictBase) -> None:
        """:meth:`_check_inputs` for the keys the value estimator reads (no advantage given)."""
        self._check_inputs(tensordict, self._estimator_keys)

    # ---- networks ----------------------------------------------------------------------------

    def convert_to_functional(
        self,
        module: nn.Module,
        module_name: str,
        expand_dim: int | None = None,
        create_target_params: bool = False,
        compare_against: object = None,
    ) -> None:
        """Registers a network at ``module_name``, with target parameters or as an ensemble.

        Args:
            module: the network.
            module_name: the attribute it is stored at (e.g. ``"actor_network"``).
            expand_dim: when given, build an ensemble of that many independently initialised
                copies (the first keeps ``module``'s weights); their tensors are stacked in
                ``<module_name>_params`` (``[expand_dim, ...]``) and the loss holds its own
                copy of the network.
            create_target_params: also make ``target_<module_name>_params``, a detached copy
                (buffers) updated by :class:`~torchrl.objectives.SoftUpdate` or
                :class:`~torchrl.objectives.HardUpdate`.
            compare_against: unused; parameters shared with other networks are handled by the
                losses' ``separate_losses`` option.

        A network with lazy parameters (``nn.LazyLinear``, ``MLP`` without ``in_features``)
        is run once on the loss's first input, just before that call, and converted then;
        build the optimizer after that first call when the network is an ensemble or has a
        target (the stacked and target tensors are created there).
        """
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"{type(self).__name__}: {module_name} must be an nn.Module, got "
                f"{type(module).__name__}"
            )
        if _lazy_names(module):
            # Lazy layers get their shapes from the first batch the loss sees: the network is
            # registered as it is now and converted (targets, ensembles) just before that call.
            setattr(self, module_name, module)
            self._pending_lazy[module_name] = (module, expand_dim, create_target_params)
            if self._lazy_hook is None:
                self._lazy_hook = self.register_forward_pre_hook(
                    _materialize_lazy_networks, with_kwargs=True
                )
            return
        if expand_dim is None:
            source = TensorDict.from_module(module)
            keys = [k if isinstance(k, tuple) else (k,) for k in source.keys(True, True)]
            setattr(self, module_name, module)
            slots = TensorSlots(module, keys)
        else:
            if expand_dim < 1:
                raise ValueError(f"expand_dim must be >= 1, got {expand_dim}")
            members = [module] + [copy.deepcopy(module) for _ in range(expand_dim - 1)]
            if expand_dim > 1 and not all(_reset_parameters(m) for m in members[1:]):
                warn_once(
                    f"{type(self).__name__}: {module_name} has no reset_parameters(); the "
                    f"{expand_dim} ensemble members start identical"
                )
            source = TensorDict.from_modules(*members, as_module=True)
            keys = [k if isinstance(k, tuple) else (k,) for k in source.keys(True, True)]
            template = copy.deepcopy(module)
            slots = TensorSlots(template, keys)
            # The template keeps no tensors of its own: the stacked ones are the only copy.
            slots.clear()
            setattr(self, module_name, template)
            setattr(self, f"{module_name}_params", source)
        if create_target_params:
            target = TensorDictParams(source.detach().clone(), no_convert=True)
            setattr(self, f"target_{module_name}_params", target)
        self._networks[module_name] = _Network(
            keys=keys, slots=slots, ensemble_size=expand_dim, has_target=create_target_params
        )
        self._leaves_cache.clear()

    @property
    def target_network_names(self) -> list[str]:
        """Names of the networks that have target parameters."""
        return [name for name, net in self._networks.items() if net.has_target]

    def network_params(self, name: str, target: bool = False) -> TensorDictBase:
        """The parameters and buffers of a converted network as a TensorDict.

        Args:
            name: the network's attribute name (e.g. ``"qvalue_network"``).
            target: return the target copy instead.

        Returns:
            A TensorDict sharing the network's tensors (``[n, ...]`` for an ensemble of ``n``).
        """
        net = self._network(name)
        if target:
            if not net.has_target:
                raise KeyError(f"{type(self).__name__}.{name} has no target parameters")
            return getattr(self, f"target_{name}_params")
        if net.ensemble_size is not None:
            return getattr(self, f"{name}_params")
        return TensorDict.from_module(getattr(self, name))

    def _network(self, name: str) -> _Network:
        try:
            return self._networks[name]
        except KeyError:
            raise KeyError(
                f"{type(self).__name__} has no converted network {name!r}; "
                f"known: {sorted(self._networks)}"
            ) from None

    def _leaves(self, attr: str) -> list[Tensor]:
        if torch.compiler.is_compiling():
            # Traced, the walk costs nothing at run time, while reading (and filling) the
            # cache would make the graph guard on its contents: a recompile once it fills.
            return list(getattr(self, attr).values(True, True))
        leaves = self._leaves_cache.get(attr)
        if leaves is None:
            leaves = self._leaves_cache[attr] = list(getattr(self, attr).values(True, True))
        return leaves

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> LossModule:
        self._leaves_cache.clear()
        return super()._apply(fn, *args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """See :meth:`torch.nn.Module.load_state_dict` (``assign=True`` replaces tensors)."""
        self._leaves_cache.clear()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _online_tensors(self, name: str) -> list[Tensor]:
        net = self._network(name)
        if net.ensemble_size is not None:
            return self._leaves(f"{name}_params")
        return net.slots.read()

    def network_tensors(
        self,
        name: str,
        param_set: ParamSet = ParamSet.ONLINE,
        *,
        detach_shared_with: str | None = None,
    ) -> list[Tensor]:
        """The tensors of a converted network, flat, in the order of its parameters and buffers.

        Args:
            name: the network's attribute name (e.g. ``"actor_network"``).
            param_set: which tensors (see :class:`~torchrl.objectives.ParamSet`).
            detach_shared_with: with :attr:`ParamSet.ONLINE`, detach the tensors that network
                ``detach_shared_with`` shares (e.g. a trunk common to actor and critic), so
                that a loss of ``name`` does not train them.

        Returns:
            One tensor per parameter or buffer (``[n, ...]`` each for an ensemble of ``n``).

        Examples:
            >>> from torchrl.modules import QValueActor
            >>> from torchrl.objectives import DQNLoss
            >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
            >>> [tuple(t.shape) for t in loss.network_tensors("value_network", ParamSet.TARGET)]
            [(2, 4), (2,)]
        """
        if not isinstance(param_set, ParamSet):
            raise TypeError(
                f"param_set must be a ParamSet (ONLINE, TARGET, DETACHED), got {param_set!r}"
            )
        online = self._online_tensors(name)
        if detach_shared_with is not None:
            if param_set is not ParamSet.ONLINE:
                raise ValueError("detach_shared_with applies to the online tensors only")
            shared = {id(t) for t in self._online_tensors(detach_shared_with)}
            return [t.detach() if id(t) in shared else t for t in online]
        if param_set is ParamSet.ONLINE:
            return online
        if param_set is ParamSet.TARGET:
            return self._target_tensors(name)
        return [t.detach() for t in online]

    def _target_tensors(self, name: str) -> list[Tensor]:
        if not self._network(name).has_target:
            # Without a delayed copy the target is the online network, without gradients.
            return [t.detach() for t in self._online_tensors(name)]
        return self._leaves(f"target_{name}_params")

    @contextmanager
    def using_tensors(self, name: str, tensors: Sequence[Tensor]) -> Iterator[nn.Module]:
        """A context in which network ``name`` computes with ``tensors`` instead of its own.

        Args:
            name: a converted network.
            tensors: one per parameter or buffer, as :meth:`network_tensors` returns them.

        Yields:
            The network.

        Examples:
            >>> from torchrl.modules import QValueActor
            >>> from torchrl.objectives import DQNLoss
            >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
            >>> zeros = [torch.zeros_like(t) for t in loss.network_tensors("value_network")]
            >>> with loss.using_tensors("value_network", zeros) as net:
            ...     net.module[0].module(torch.ones(1, 4))
            tensor([[0., 0.]])
        """
        with self._network(name).slots.swapped(tensors):
            yield getattr(self, name)

    def _call_network(
        self,
        name: str,
        tensordict: TensorDictBase,
        param_set: ParamSet = ParamSet.ONLINE,
        *,
        modules: Sequence[nn.Module] | None = None,
    ) -> TensorDictBase:
        """Calls a (non-ensemble) network on ``tensordict`` with one of its parameter sets.

        Args:
            name: a converted network.
            tensordict: its input; the outputs are written into it.
            param_set: which tensors (see :class:`~torchrl.objectives.ParamSet`).
            modules: run these sub-modules of the network, in order, instead of the network
                itself (e.g. a Q-value actor without its greedy head).

        Returns:
            ``tensordict`` (or what the last module returns).
        """
        network = getattr(self, name)
        run = list(modules) if modules is not None else [network]
        if param_set is ParamSet.DETACHED and not torch.is_grad_enabled():
            # Nothing records gradients: the online tensors give the same values, unswapped.
            param_set = ParamSet.ONLINE
        if len(run) == 1:
            out = self._direct_output(name, tensordict, param_set, run[0])
            if out is not None:
                tensordict.set(cast(TensorDictModule, run[0]).out_keys[0], out)
                return tensordict
        # The online tensors already sit in the slots: no swap needed.
        # The other tensors go into the slots for the call (what using_tensors does, without
        # its two generator-based context managers: ~3 us a call).
        slots = None if param_set is ParamSet.ONLINE else self._network(name).slots
        old = None if slots is None else slots.write(self.network_tensors(name, param_set))
        try:
            for module in run:
                # The slots hold the chosen tensors: each module runs as the online network.
                out = self._direct_output(name, tensordict, ParamSet.ONLINE, module)
                if out is None:
                    tensordict = module(tensordict)
                else:
                    tensordict.set(cast(TensorDictModule, module).out_keys[0], out)
        finally:
            if slots is not None:
                slots.write(cast(list[Tensor], old))
        return tensordict

    def _direct_output(
        self,
        name: str,
        tensordict: TensorDictBase,
        param_set: ParamSet = ParamSet.ONLINE,
        module: nn.Module | None = None,
    ) -> Tensor | None:
        """What (non-ensemble) network ``name``, or ``module``, one of its sub-modules, writes
        at its one out-key, called on its inputs in ``tensordict``; nothing is written.

        ``None`` unless the module calls its network directly (:func:`calls_network_directly`)
        and its inputs are there: the caller then calls it as a module. A plain ``MLP`` gets
        the target or detached tensors as arguments
        (:func:`~torchrl.modules.models.mlp.planned_forward`), without the two writes of the
        slots that other networks cost.
        """
        module = getattr(self, name) if module is None else module
        args = direct_call_inputs(module, tensordict)
        if args is None:
            return None
        return self._run_direct(name, module, args, param_set)

    def _run_direct(
        self, name: str, module: nn.Module, args: list[Tensor], param_set: ParamSet
    ) -> Tensor:
        """The output of ``module`` (network ``name`` or one of its sub-modules, one that
        :func:`calls_network_directly`) on its inputs ``args``, with the ``param_set`` tensors.

        Split from :meth:`_direct_output` for a caller that runs one module with several
        parameter sets on the same inputs (read and checked once).
        """
        if param_set is ParamSet.DETACHED and not torch.is_grad_enabled():
            param_set = ParamSet.ONLINE
        inner = wrapped_network(module)
        if param_set is ParamSet.ONLINE:
            return inner(*args)
        tensors = self.network_tensors(name, param_set)
        plan = self._mlp_plan(name, module)
        if plan is not None:
            from torchrl.modules.models.mlp import planned_forward

            out = planned_forward(inner, plan, tensors, *args)
            if out is not None:
                return out
        slots = self._network(name).slots
        old = slots.write(tensors)
        try:
            return inner(*args)
        finally:
            slots.write(old)

    def _member_views(self, name: str, param_set: ParamSet) -> list[list[Tensor]] | None:
        """Per-member views of the target or detached tensors of ensemble ``name``, made once.

        The views share storage and version counter with the stacked tensors, so in-place
        updates (optimizer steps on the online tensors, target updates) show through them
        exactly as through views made at each call; none of them requires grad, so no graph
        is kept between calls. The cache entry is checked against the stacked tensors'
        identity and data pointer at each call (``.data`` assignments, ``load_state_dict``,
        ``.to()`` make new views) and is not used under tracing. ``None`` for the online
        tensors (their views carry the autograd graph of one call) and when no cache applies.
        """
        if param_set is ParamSet.ONLINE or torch.compiler.is_compiling():
            return None
        net = self._network(name)
        if net.ensemble_size is None:
            return None
        if param_set is ParamSet.TARGET and net.has_target:
            sources = self._leaves(f"target_{name}_params")
        else:
            sources = self._online_tensors(name)
        key = f"views:{name}:{param_set.value}"
        entry = self._leaves_cache.get(key)
        if entry is not None:
            kept, pointers, views = entry
            if (
                len(kept) == len(sources)
                and all(a is b for a, b in zip(kept, sources))
                and all(t.data_ptr() == ptr for t, ptr in zip(sources, pointers))
            ):
                return views
        with torch.no_grad():
            per_tensor = [t.detach().unbind(0) for t in sources]
        views = [list(member) for member in zip(*per_tensor)]
        self._leaves_cache[key] = (list(sources), [t.data_ptr() for t in sources], views)
        return views

    def _mlp_plan(self, name: str, module: nn.Module | None = None) -> Any:
        """How the ``MLP`` that ``module`` (network ``name`` itself by default) wraps runs on a
        flat list of the network's tensors (:func:`~torchrl.modules.models.mlp.mlp_plan`), made
        once; ``None`` unless it is a plain ``MLP``."""
        network = getattr(self, name)
        module = network if module is None else module
        key = f"plan:{name}:{id(module)}"
        # Traced, the plan is made at each trace (no guard on the cache's contents, as _leaves).
        compiling = torch.compiler.is_compiling()
        plan = False if compiling else self._leaves_cache.get(key, False)
        if plan is False:
            from torchrl.modules.models.mlp import mlp_plan

            plan = None
            inner = module._modules.get("module")
            path = next((p for p, sub in network.named_modules() if sub is inner), None)
            if inner is not None and path is not None:
                prefix = tuple(path.split("."))
                keys = self._network(name).keys
                # The MLP's tensors among the network's, and their positions in the flat list.
                positions = [i for i, k in enumerate(keys) if k[: len(prefix)] == prefix]
                own = mlp_plan(inner, [keys[i][len(prefix) :] for i in positions])
                if own is not None:
                    plan = [
                        (
                            layer,
                            None if w is None else positions[w],
                            None if b is None else positions[b],
                        )
                        for layer, w, b in own
                    ]
            if not compiling:
                self._leaves_cache[key] = plan
        return plan

    def _call_ensemble(
        self,
        name: str,
        tensordict: TensorDictBase,
        out_keys: Sequence[NestedKey],
        param_set: ParamSet = ParamSet.ONLINE,
        *,
        tensors: Sequence[Tensor] | None = None,
        first: int | None = None,
        minimum: bool = False,
    ) -> list[Tensor]:
        """Calls every member of an ensemble (``expand_dim``) on the same data.

        How: a network that is a plain ``MLP`` behind a direct ``TensorDictModule`` runs all
        members at once on the stacked tensors (:func:`~torchrl.modules.models.mlp.planned_forward`:
        one batched matmul per layer); other networks loop over the members (two on a CPU,
        or with ``deactivate_vmap`` or autocast) or are vmapped.

        Args:
            name: a network converted with ``expand_dim``.
            tensordict: the input (the members' inputs are selected from it).
            out_keys: the outputs to collect.
            param_set: which tensors (see :class:`~torchrl.objectives.ParamSet`).
            tensors: stacked tensors to use instead (e.g. a subset of the members).
            first: call only the first ``first`` members of ``param_set``.
            minimum: return the element-wise minimum over the members (``[*B, ...]``) instead
                of their stack; looped members are folded with ``torch.minimum``, without the
                stack and the reduction over it.

        Returns:
            One tensor per key of ``out_keys``, stacked ``[n, *B, ...]`` over the members
            (``[*B, ...]`` with ``minimum``).
        """
        module = getattr(self, name)
        args = direct_call_inputs(module, tensordict, out_keys)
        plan = None
        if args is not None and (first is None or first > 1):
            # (One member alone is called as the module, on cached views when there are.)
            plan = self._mlp_plan(name)
        if plan is not None:
            # An MLP: every member in one batched matmul per layer, on the stacked tensors.
            from torchrl.modules.models.mlp import planned_forward

            stacked = tensors
            if stacked is None:
                stacked = self.network_tensors(name, param_set)
                if first is not None:
                    stacked = [t[:first] for t in stacked]
            out = planned_forward(module.module, plan, stacked, *cast(list[Tensor], args))
            if out is not None:
                return [out.amin(0) if minimum else out]
        cached = None if tensors is not None else self._member_views(name, param_set)
        if cached is not None:
            members = len(cached) if first is None else min(first, len(cached))
            device_type = cached[0][0].device.type
        else:
            if tensors is None:
                tensors = self.network_tensors(name, param_set)
                if first is not None:
                    tensors = [t[:first] for t in tensors]
            members = tensors[0].shape[0]
            device_type = tensors[0].device.type
        inputs = tensordict.select(*module.in_keys, strict=False) if args is None else None
        # vmap's fixed cost per call (batching every op, pytree handling) exceeds a second
        # Python call for the usual pair of critics on CPU: twin critics are looped there
        # (same results; ~20% of a small SAC update).
        # Under set_autocast too: torch.vmap skips autocast for a linear layer with a bias
        # (the members' matmuls would run in float32).
        loop = (
            self.deactivate_vmap
            or self.autocast_dtype is not None
            or (members <= 2 and device_type == "cpu")
        )
        slots = self._networks[name].slots

        network: Any = module.module if args is not None else None

        def one(flat: list[Tensor]) -> tuple[Tensor, ...]:
            old = slots.write(flat)
            try:
                if args is not None:
                    return (network(*args),)
                out = module(inputs.copy())  # type: ignore[union-attr]
            finally:
                slots.write(cast(list[Tensor], old))
            return tuple(out.get(k) for k in out_keys)

        if loop:
            if cached is not None:
                outs = [one(flat) for flat in cached[:members]]
            else:
                # unbind: one autograd node per tensor whose backward stacks the members'
                # gradients, where indexing member by member adds a zero-filled gradient per
                # member and sums.
                per_member = [t.unbind(0) for t in cast(Sequence[Tensor], tensors)]
                outs = [one([u[i] for u in per_member]) for i in range(members)]
            if minimum:
                return [functools.reduce(torch.minimum, group) for group in zip(*outs)]
            return [torch.stack(group) for group in zip(*outs)]
        if tensors is None:
            tensors = self.network_tensors(name, param_set)
            if first is not None:
                tensors = [t[:first] for t in tensors]
        # Only the vmapped network's own modules decide (not the whole loss).
        stacked = list(torch.vmap(one, randomness=_vmap_randomness(module))(list(tensors)))
        return [t.min(0).values for t in stacked] if minimum else stacked

    # ---- compilation and mixed precision ---------------------------------------------------

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compiles the loss's call in place with :func:`torch.compile` (``loss(td)`` then runs it).

        Like :meth:`torch.nn.Module.compile` (hooks, the loss mask and the lazy-network
        initialisation included), except that when compilation itself fails (dynamo cannot
        trace a network, no C++ compiler, ...) a ``RuntimeWarning`` naming the loss and the
        error is issued once and the loss runs eagerly from then on
        (:func:`torchrl.maybe_compile`). The value estimator is traced with the loss
        when the loss calls it; compile it alone with its own ``compile``. Batch-size changes
        cost one recompilation (then the sizes are dynamic). An input with a validity mask
        (see :attr:`loss_mask_key`) breaks the graph where the valid positions are selected
        (their number depends on the data). For a whole update step, compile a function
        calling the loss, ``backward`` and the optimizer: ``backward`` is a graph break, the
        rest compiles. Copies (``deepcopy``, pickling) compile their own call.

        Args:
            *args: none accepted (``torch.compile`` takes keywords only).
            **kwargs: :func:`torch.compile` keyword arguments (``backend``, ``mode``,
                ``fullgraph``, ``dynamic``, ...), plus ``warmup``: the number of eager calls
                before compiling (e.g. ``1`` for networks with lazy layers).

        Examples:
            >>> from torchrl.modules import QValueActor
            >>> from torchrl.objectives import DQNLoss
            >>> from tensordict import TensorDict
            >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="one_hot"))
            >>> loss.compile(backend="aot_eager")
            >>> td = TensorDict({"observation": torch.randn(8, 4), "action": torch.eye(2)[
            ...     torch.randint(2, (8,))], "next": {"observation": torch.randn(8, 4),
            ...     "reward": torch.randn(8, 1), "done": torch.zeros(8, 1, dtype=torch.bool),
            ...     "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
            >>> loss(td)["loss"].shape
            torch.Size([])
        """
        compile_in_place(self, args, kwargs)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype the networks run in under :meth:`set_autocast` (``None``: their own)."""
        return getattr(self, "_autocast_dtype", None)

    def set_autocast(
        self, dtype: torch.dtype | None = torch.bfloat16, device_type: str | None = None
    ) -> LossModule:
        """Runs the loss's networks under :func:`torch.autocast` (mixed precision).

        The inner module of every ``TensorDictModule`` of the loss (the MLPs of actors, critics
        and Q-networks, the estimator's value network) runs under autocast and returns its
        float16/bfloat16 outputs cast to float32. Everything computed from them stays float32:
        distributions' parameters and log-probabilities, value targets and advantages, TD
        errors and priorities, the ``loss_*`` terms. Parameters and their gradients keep their
        dtype. Networks held by other tensordict modules (``LSTMModule``, ``GRUModule``,
        ``GTrXLModule``, ...) are left in their own dtype. Ensembles (``num_qvalue_nets``) are
        called member by member instead of under :func:`torch.vmap`, which skips autocast for
        linear layers with a bias. ``bfloat16`` needs nothing else; with ``float16``, scale
        the loss with :class:`torch.amp.GradScaler` to keep small gradients from flushing to
        zero. Meant for GPUs and large networks: small networks on a CPU run slower (the casts
        cost more than the bfloat16 matmuls save).

        Args:
            dtype: the networks' compute dtype (``torch.bfloat16`` or ``torch.float16``);
                ``None`` turns autocast off again.
            device_type: ``"cpu"``, ``"cuda"``, ...; default: at every call, the device of
                the network's first input tensor.

        Returns:
            The loss.

        Examples:
            >>> from torchrl.modules import MLP, QValueActor
            >>> from torchrl.objectives import DQNLoss
            >>> from tensordict import TensorDict
            >>> net = MLP(in_features=4, out_features=2, num_cells=[32])
            >>> loss = DQNLoss(QValueActor(net, action_space="one_hot")).set_autocast()
            >>> td = TensorDict({"observation": torch.randn(8, 4), "action": torch.eye(2)[
            ...     torch.randint(2, (8,))], "next": {"observation": torch.randn(8, 4),
            ...     "reward": torch.randn(8, 1), "done": torch.zeros(8, 1, dtype=torch.bool),
            ...     "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
            >>> out = loss(td)
            >>> out["loss"].dtype, td["td_error"].dtype
            (torch.float32, torch.float32)
            >>> # float16: scale the loss (bfloat16 needs no scaler)
            >>> _ = loss.set_autocast(torch.float16)
            >>> optim = torch.optim.Adam(loss.parameters())
            >>> scaler = torch.amp.GradScaler("cpu")
            >>> scaler.scale(loss(td)["loss"]).backward()
            >>> scaler.step(optim)
            >>> scaler.update()
            >>> _ = loss.set_autocast(None)  # back to the networks' own dtype
        """
        if dtype is not None and dtype not in _LOW_PRECISION:
            raise ValueError(
                f"{type(self).__name__}.set_autocast: dtype must be torch.bfloat16, "
                f"torch.float16 or None, got {dtype!r}"
            )
        if device_type is not None and not isinstance(device_type, str):
            raise TypeError(
                f"{type(self).__name__}.set_autocast: device_type must be a str such as "
                f"'cpu' or 'cuda', or None, got {type(device_type).__name__}"
            )
        for inner in _autocast_targets(self):
            if isinstance(inner.__dict__.get("forward"), _AutocastForward):
                del inner.forward
            elif "forward" in inner.__dict__:
                raise RuntimeError(
                    f"{type(self).__name__}.set_autocast: {type(inner).__name__} has an "
                    "instance-level forward already; it cannot be wrapped"
                )
            if dtype is not None:
                inner.forward = _AutocastForward(inner, dtype, device_type)  # type: ignore[method-assign]
        self._autocast_dtype = dtype
        return self

    # ---- value estimator ---------------------------------------------------------------------

    @property
    def value_estimator(self) -> ValueEstimatorBase:
        """The value estimator (made with the loss's defaults on first use)."""
        if self._estimator.value is None:
            self.make_value_estimator()
        return self._estimator.value

    @value_estimator.setter
    def value_estimator(self, estimator: ValueEstimatorBase) -> None:
        self._estimator.value = estimator

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> LossModule:
        """Chooses the value estimator, e.g. ``make_value_estimator(ValueEstimators.GAE, lmbda=0.9)``.

        Args:
            value_type: a :class:`~torchrl.objectives.ValueEstimators` member (default: the
                loss's ``default_value_estimator``).
            **hyperparams: estimator arguments (``gamma``, ``lmbda``, ``average_gae``, ...)
                overriding :func:`~torchrl.objectives.utils.default_value_kwargs`.

        Returns:
            The loss.
        """
        if value_type is None:
            value_type = self.default_value_estimator
        if value_type is None:
            raise NotImplementedError(f"{type(self).__name__} uses no value estimator")
        value_type = ValueEstimators(value_type)
        if value_type not in self._supported_estimators:
            raise NotImplementedError(
                f"{type(self).__name__} does not support the {value_type.name} value estimator; "
                f"supported: {[v.name for v in self._supported_estimators]}"
            )
        kwargs: dict[str, Any] = dict(default_value_kwargs(value_type))
        kwargs.update(hyperparams)
        kwargs.setdefault("value_network", self._estimator_value_network())
        if value_type is ValueEstimators.VTrace:
            kwargs.setdefault("actor_network", self._estimator_actor_network())
        self._estimator.value = self._estimator_class(value_type)(**kwargs)
        self.value_type = value_type
        self._sync_estimator_keys()
        return self

    def _estimator_class(self, value_type: ValueEstimators) -> type[ValueEstimatorBase]:
        """The estimator class built for ``value_type`` (subclasses may specialise one)."""
        return _ESTIMATOR_CLASSES[value_type]

    def _estimator_value_network(self) -> nn.Module | None:
        """The network the estimator calls for ``V(s)`` (None: the loss gives the values)."""
        return None

    def _estimator_actor_network(self) -> nn.Module | None:
        return None

    def _sync_estimator_keys(self) -> None:
        estimator = self._estimator.value
        if estimator is None:
            return
        ours = dataclasses.asdict(self._tensor_keys)
        theirs = {f.name for f in dataclasses.fields(estimator.tensor_keys)}
        estimator.set_keys(**{k: v for k, v in ours.items() if k in theirs})

    # ---- misc --------------------------------------------------------------------------------

    def reset(self) -> None:
        """Resets state kept across calls (none by default)."""

    def __repr__(self) -> str:
        nets = ", ".join(
            f"{name}" + (f"[x{n.ensemble_size}]" if n.ensemble_size else "")
            for name, n in self._networks.items()
        )
        return f"{type(self).__name__}(networks=[{nets}], value_type={self.value_type})"
