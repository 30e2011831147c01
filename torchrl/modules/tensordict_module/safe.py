"""Tensordict modules that know the spec of their outputs and can project them into it.

``SafeModule``, ``SafeSequential``, ``SafeProbabilisticModule`` and
``SafeProbabilisticTensorDictSequential`` are the ``tensordict.nn`` classes with two more
keywords: ``spec`` (what the outputs look like) and ``safe`` (project the outputs into ``spec``
after each call). The projection is the one the actors use (``_spec_utils.project_keys``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from tensordict import TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)
from torch import nn

from torchrl._types import NestedKey
from torchrl.envs._key_paths import key_tuple
from torchrl.modules._spec_utils import as_composite, key_list, module_keys, project_keys

if TYPE_CHECKING:
    from torchrl.data.specs.base import TensorSpec

__all__ = [
    "SafeModule",
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
    "SafeSequential",
]


def _output_spec(spec: Any, out_keys: Sequence[NestedKey], safe: bool, owner: str) -> Any:
    """``spec`` as a ``Composite`` over ``out_keys`` (a leaf describes the first), checked."""
    if safe and spec is None:
        raise ValueError(f"{owner}: safe=True needs a spec to project the outputs into")
    composite = as_composite(spec, out_keys)
    if composite is None:
        return None
    written = [key_tuple(k) for k in out_keys]
    for key in composite.keys(True, True):
        parts = key_tuple(key)
        # A leaf of the spec names an output, or an entry inside an output tensordict.
        if not any(parts[: len(w)] == w for w in written):
            raise KeyError(
                f"{owner}: the spec describes {key!r}, which is not one of the out_keys "
                f"{list(out_keys)}"
            )
    return composite


def _merged_spec(modules: Iterable[nn.Module]) -> Any:
    """The union of the ``spec`` of ``modules`` (``None`` when none of them has one)."""
    merged = None
    for module in modules:
        spec = getattr(module, "spec", None)
        if spec is None:
            continue
        if merged is None:
            from torchrl.data import Composite

            merged = Composite()
        merged.update(spec)
    return merged


def _project(out: TensorDictBase, spec: Any, keys: Sequence[NestedKey]) -> TensorDictBase:
    project_keys(out, spec, keys)
    return out


class SafeModule(TensorDictModule):
    """A :class:`~tensordict.nn.TensorDictModule` with an output ``spec``, projected into when ``safe``.

    Args:
        module: the callable (network) mapping the ``in_keys`` values to the ``out_keys`` values.
        in_keys: keys read, passed positionally in order.
        out_keys: keys written, one per returned tensor.
        spec: spec of the outputs: a leaf spec (it describes the first out key) or a
            ``Composite`` keyed by out keys.
        safe: after each call, project the outputs described by ``spec`` into it (values out of
            bounds after exploration noise or numerical overflow are brought back).
        **kwargs: other :class:`~tensordict.nn.TensorDictModule` keywords (``inplace``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded
        >>> mod = SafeModule(torch.nn.Linear(3, 2), in_keys=["obs"], out_keys=["out"],
        ...                  spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> td = mod(TensorDict(obs=torch.full((4, 3), 100.0), batch_size=[4]))
        >>> bool(td["out"].abs().max() <= 1.0)
        True
    """

    def __init__(
        self,
        module: Any,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[NestedKey, str],
        out_keys: NestedKey | Sequence[NestedKey],
        spec: TensorSpec | None = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        keys_in = in_keys if isinstance(in_keys, Mapping) else module_keys(key_list(in_keys))
        keys_out = module_keys(key_list(out_keys))
        super().__init__(module, in_keys=cast(Any, keys_in), out_keys=keys_out, **kwargs)
        self.spec = _output_spec(spec, keys_out, safe, str(type(self).__name__))
        self.safe = safe

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        out = super().forward(tensordict, *args, **kwargs)
        return _project(out, self.spec, self.out_keys) if self.safe else out


class SafeProbabilisticModule(ProbabilisticTensorDictModule):
    """A :class:`~tensordict.nn.ProbabilisticTensorDictModule` whose samples can be projected into a spec.

    It reads the distribution parameters at ``in_keys``, builds ``distribution_class`` and
    writes a value (per the exploration type) at ``out_keys``. With ``safe=True`` the value is
    projected into ``spec``; the log-probability (``return_log_prob``) is the one of the value
    before projection.

    Args:
        in_keys: parameter keys (their last names are the distribution's keywords), or a dict
            ``{distribution keyword: key}``.
        out_keys: sample keys (tensordict's default is ``["_"]``: pass the key you want).
        spec: spec of the samples (a leaf spec for the first out key, or a ``Composite``).
        safe: project the samples into ``spec`` after each call.
        **kwargs: other :class:`~tensordict.nn.ProbabilisticTensorDictModule` keywords
            (``distribution_class``, ``distribution_kwargs``, ``return_log_prob``,
            ``log_prob_key``, ``default_interaction_type``, ``cache_dist``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import set_interaction_type
        >>> from torchrl.data import Bounded
        >>> mod = SafeProbabilisticModule(["loc", "scale"], ["action"],
        ...     spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True,
        ...     distribution_class=torch.distributions.Normal)
        >>> td = TensorDict(loc=torch.full((3, 2), 5.0), scale=torch.ones(3, 2), batch_size=[3])
        >>> with set_interaction_type("random"):
        ...     bool(mod(td)["action"].abs().max() <= 1.0)
        True
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        keys_in = in_keys if isinstance(in_keys, Mapping) else module_keys(key_list(in_keys))
        keys_out = module_keys(key_list(out_keys)) if out_keys is not None else None
        super().__init__(in_keys=cast(Any, keys_in), out_keys=keys_out, **kwargs)
        self.spec = _output_spec(
            spec, list(cast(Any, self.dist_sample_keys)), safe, str(type(self).__name__)
        )
        self.safe = safe

    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        out = super().forward(tensordict, tensordict_out, **kwargs)
        return _project(out, self.spec, cast(Any, self.dist_sample_keys)) if self.safe else out


class SafeSequential(TensorDictSequential):
    """A :class:`~tensordict.nn.TensorDictSequential` that carries the specs of its modules.

    ``spec`` is the union of the modules' specs (a ``Composite``), or the one given (a leaf
    spec describes the last module's first output). Modules that are safe project their own
    outputs as they run; ``safe=True`` here also projects the final outputs into ``spec``.

    Args:
        *modules: tensordict modules run in order.
        partial_tolerant: run only the modules whose inputs are present.
        spec: the spec of the outputs (default: the union of the modules' specs).
        safe: project the outputs described by ``spec`` after the whole sequence.
        **kwargs: other :class:`~tensordict.nn.TensorDictSequential` keywords.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded, Unbounded
        >>> hidden = SafeModule(torch.nn.Linear(3, 4), ["obs"], ["hidden"], spec=Unbounded(4))
        >>> head = SafeModule(torch.nn.Linear(4, 2), ["hidden"], ["out"],
        ...                   spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> seq = SafeSequential(hidden, head)
        >>> sorted(seq.spec.keys())
        ['hidden', 'out']
        >>> td = seq(TensorDict(obs=torch.full((5, 3), 50.0), batch_size=[5]))
        >>> bool(td["out"].abs().max() <= 1.0)
        True
    """

    def __init__(
        self,
        *modules: TensorDictModuleBase,
        partial_tolerant: bool = False,
        spec: TensorSpec | None = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*modules, partial_tolerant=partial_tolerant, **kwargs)
        keys = list(self.out_keys)
        if spec is None:
            spec = _merged_spec(self.module)
        elif modules:
            # A leaf spec describes the result of the sequence: the last module's first output.
            last = list(modules[-1].out_keys)
            keys = last + [k for k in keys if k not in last]
        self.spec = _output_spec(spec, keys, safe, str(type(self).__name__))
        self.safe = safe

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        out = super().forward(tensordict, *args, **kwargs)
        return _project(out, self.spec, self.out_keys) if self.safe else out


class SafeProbabilisticTensorDictSequential(ProbabilisticTensorDictSequential):
    """A :class:`~tensordict.nn.ProbabilisticTensorDictSequential` that carries the specs of its modules.

    The last module builds the distribution (``get_dist`` returns it). ``spec`` is the union of
    the modules' specs, or the one given; ``safe=True`` projects the final outputs into it (a
    :class:`SafeProbabilisticModule` at the end can also project its own samples).

    Args:
        *modules: tensordict modules, the last one probabilistic.
        partial_tolerant: run only the modules whose inputs are present.
        spec: the spec of the outputs (default: the union of the modules' specs).
        safe: project the outputs described by ``spec`` after the whole sequence.
        **kwargs: other :class:`~tensordict.nn.ProbabilisticTensorDictSequential` keywords.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, set_interaction_type
        >>> from torchrl.data import Bounded
        >>> net = SafeModule(torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor()),
        ...                  ["obs"], ["loc", "scale"])
        >>> sampler = SafeProbabilisticModule(["loc", "scale"], ["action"],
        ...     distribution_class=torch.distributions.Normal, return_log_prob=True)
        >>> policy = SafeProbabilisticTensorDictSequential(
        ...     net, sampler, spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> with set_interaction_type("random"):
        ...     td = policy(TensorDict(obs=torch.randn(6, 3) * 100, batch_size=[6]))
        >>> bool(td["action"].abs().max() <= 1.0), td["action_log_prob"].shape
        (True, torch.Size([6, 2]))
    """

    def __init__(
        self,
        *modules: TensorDictModuleBase,
        partial_tolerant: bool = False,
        spec: TensorSpec | None = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*modules, partial_tolerant=partial_tolerant, **kwargs)
        sample_keys = list(getattr(self, "dist_sample_keys", None) or self.out_keys)
        if spec is None:
            spec = _merged_spec(self.module)
            keys = self.out_keys
        else:
            keys = sample_keys
        self.spec = _output_spec(spec, keys, safe, str(type(self).__name__))
        self.safe = safe

    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        out = super().forward(tensordict, tensordict_out, **kwargs)
        return _project(out, self.spec, self.out_keys) if self.safe else out
