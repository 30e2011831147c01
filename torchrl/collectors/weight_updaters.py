"""TorchRL's older weight-updater API, as thin adapters over :mod:`torchrl.weight_update`.

A weight updater pushes new weights to the copies of a policy. Each class here resolves the
weights to push (given, or read from a ``weight_getter``/server) and hands them to a
:class:`~torchrl.weight_update.WeightSyncScheme`: its own when it was given its targets, else
the ``"policy"`` scheme of the collector it is registered with. New code uses the schemes
directly (a collector's ``weight_sync_schemes`` keyword).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl.weight_update import (
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
)
from torchrl.weight_update.weights import flat_weights

__all__ = [
    "MultiProcessedWeightUpdater",
    "RayWeightUpdater",
    "VanillaWeightUpdater",
    "WeightUpdaterBase",
]


class WeightUpdaterBase:
    """Pushes weights to a policy's copies through a weight sync scheme.

    :meth:`push_weights` (also ``updater(...)``) takes the weights given, else those of
    :meth:`_get_server_weights`, maps them with :meth:`_maybe_map_weights` and sends them with
    :attr:`scheme`, then runs the hooks of :meth:`register_post_hook`. A collector given
    ``weight_updater=`` registers itself (:meth:`register_collector`) and calls
    :meth:`push_weights` from its ``update_policy_weights_``.

    Args:
        scheme: the scheme to send with (an initialised sender); ``None``: the registered
            collector's ``"policy"`` scheme.

    Examples:
        A subclass that reads the weights to push from the trainer's network:

        >>> import torch
        >>> from torchrl.weight_update import SharedMemWeightSyncScheme
        >>> trainer_net, policy = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> class FromTrainer(WeightUpdaterBase):
        ...     def _get_server_weights(self):
        ...         return trainer_net
        >>> scheme = SharedMemWeightSyncScheme()
        >>> scheme.init_on_sender(policy)  # copies the policy's weights into shared memory
        >>> updater = FromTrainer(scheme)
        >>> updater.push_weights()
        1
        >>> torch.equal(scheme.shared_weights["weight"], trainer_net.weight)  # workers read it
        True
    """

    def __init__(self, scheme: WeightSyncScheme | None = None) -> None:
        if scheme is not None and not isinstance(scheme, WeightSyncScheme):
            raise TypeError(
                f"{type(self).__name__}: scheme must be a WeightSyncScheme, got "
                f"{type(scheme).__name__}"
            )
        self._scheme = scheme
        self._collector: Any = None
        self._post_hooks: list[Callable[[], Any]] = []
        self._pushing = False

    def register_collector(self, collector: Any) -> None:
        """Attaches this updater to ``collector`` (kept as a weak reference)."""
        self._collector = weakref.ref(collector)

    @property
    def collector(self) -> Any | None:
        """The registered collector, or ``None``."""
        return self._collector() if self._collector is not None else None

    @property
    def scheme(self) -> WeightSyncScheme:
        """The scheme the weights travel through."""
        if self._scheme is not None:
            return self._scheme
        collector = self.collector
        schemes = getattr(collector, "weight_sync_schemes", None)
        if not schemes or "policy" not in schemes:
            raise RuntimeError(
                f"{type(self).__name__} has no targets: give it its weights/workers, or pass it "
                "to a collector as weight_updater="
            )
        return schemes["policy"]

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Kept for TorchRL compatibility: nothing to initialise."""

    def all_worker_ids(self) -> list[int] | None:
        """The receivers' ids (``None``: a single local copy)."""
        ids = sorted(self.scheme.transports)
        return ids if len(ids) > 1 else None

    def register_post_hook(self, hook: Callable[[], Any]) -> None:
        """Calls ``hook()`` after each push."""
        if not callable(hook):
            raise TypeError(f"register_post_hook: hook must be callable, got {hook!r}")
        self._post_hooks.append(hook)

    def _get_server_weights(self) -> Any:
        """The weights to push when none are given (``None``: the scheme's model)."""
        return None

    def _maybe_map_weights(self, weights: Any) -> Any:
        """Transforms the weights before they are sent (identity)."""
        return weights

    @property
    def owns_scheme(self) -> bool:
        """Whether this updater sends through a scheme of its own (not its collector's)."""
        return self._scheme is not None

    def prepare_weights(self, weights: Any | None = None) -> Any:
        """The weights to send: ``weights``, else the server's, mapped.

        A collector sending through its own scheme calls this (then :meth:`run_post_hooks`).
        """
        if self._pushing:
            return weights  # already prepared by push_weights
        if weights is None:
            weights = self._get_server_weights()
        if weights is not None:
            weights = self._maybe_map_weights(weights)
        return weights

    def run_post_hooks(self) -> None:
        """Calls the hooks of :meth:`register_post_hook`."""
        for hook in self._post_hooks:
            hook()

    def push_weights(
        self,
        weights: Any | None = None,
        worker_ids: int | Sequence[int] | None = None,
    ) -> int:
        """Sends new weights to the policy's copies.

        Without a scheme of its own, the registered collector sends them (its
        ``update_policy_weights_``, which speaks its workers' protocol).

        Args:
            weights: the weights (module, state dict or TensorDict); default: the server's.
            worker_ids: the receivers (default: all).

        Returns:
            The policy version after the push.
        """
        prepared = self.prepare_weights(weights)
        if self._scheme is None:
            collector = self.collector
            if collector is None:
                raise RuntimeError(
                    f"{type(self).__name__} has no targets: give it its weights/workers, or "
                    "pass it to a collector as weight_updater="
                )
            self._pushing = True
            try:
                if worker_ids is None:
                    collector.update_policy_weights_(prepared)
                else:
                    collector.update_policy_weights_(prepared, worker_ids=worker_ids)
            finally:
                self._pushing = False
            return self.scheme.version
        version = self._scheme.send(prepared, worker_ids)
        self.run_post_hooks()
        return version

    def __call__(
        self,
        weights: Any | None = None,
        worker_ids: int | Sequence[int] | None = None,
    ) -> int:
        return self.push_weights(weights, worker_ids)

    @classmethod
    def from_policy(cls, policy: Any) -> WeightUpdaterBase | None:
        """A :class:`VanillaWeightUpdater` writing into ``policy`` (``None``: no weights)."""
        if not isinstance(policy, nn.Module):
            return None
        return VanillaWeightUpdater(policy_weights=TensorDict.from_module(policy))


def _local_scheme(weights: TensorDictBase | Mapping[str, torch.Tensor]) -> WeightSyncScheme:
    """A sender scheme whose "shared" tensors are ``weights`` themselves (in this process)."""
    scheme = SharedMemWeightSyncScheme()
    scheme.init_on_sender(None, weights=flat_weights(weights, "policy_weights"))
    return scheme


class VanillaWeightUpdater(WeightUpdaterBase):
    """Copies new weights in place into a local policy's weights.

    Args:
        weight_getter: returns the weights to push when none are given.
        policy_weights: the policy's weights to write into (a TensorDict from
            ``TensorDict.from_module(policy)``, or a state dict of its tensors); ``None``: the
            registered collector's policy.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> policy = torch.nn.Linear(2, 1)
        >>> updater = VanillaWeightUpdater(policy_weights=TensorDict.from_module(policy))
        >>> updater.push_weights({"bias": torch.ones(1)})
        1
        >>> policy.bias.item()
        1.0
    """

    def __init__(
        self,
        *,
        weight_getter: Callable[[], Any] | None = None,
        policy_weights: TensorDictBase | Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        if weight_getter is not None and not callable(weight_getter):
            raise TypeError(
                f"VanillaWeightUpdater: weight_getter must be callable, got {weight_getter!r}"
            )
        super().__init__(_local_scheme(policy_weights) if policy_weights is not None else None)
        self.weight_getter = weight_getter

    def _get_server_weights(self) -> Any:
        return self.weight_getter() if self.weight_getter is not None else None


class MultiProcessedWeightUpdater(VanillaWeightUpdater):
    """Copies new weights into the shared weights that worker processes read.

    Args:
        get_server_weights: returns the weights to push when none are given.
        policy_weights: the shared weights, by device (``{device: TensorDict}``), or one
            TensorDict/state dict; ``None``: the registered multi-process collector's.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> policy = torch.nn.Linear(2, 1)
        >>> shared = TensorDict.from_module(policy).share_memory_()
        >>> updater = MultiProcessedWeightUpdater(policy_weights={"cpu": shared})
        >>> updater.push_weights({"bias": torch.full((1,), 2.0)})
        1
        >>> shared["bias"].item()
        2.0
    """

    def __init__(
        self,
        *,
        get_server_weights: Callable[[], Any] | None = None,
        policy_weights: Any = None,
    ) -> None:
        self._extra: list[WeightSyncScheme] = []
        first = policy_weights
        if (
            isinstance(policy_weights, dict)
            and policy_weights
            and all(isinstance(v, (TensorDictBase, Mapping)) for v in policy_weights.values())
        ):
            values = list(policy_weights.values())
            first, rest = values[0], values[1:]
            self._extra = [_local_scheme(w) for w in rest]
        super().__init__(weight_getter=get_server_weights, policy_weights=first)

    def push_weights(
        self,
        weights: Any | None = None,
        worker_ids: int | Sequence[int] | None = None,
    ) -> int:
        """Writes the weights into every device's shared copy."""
        if weights is None:
            weights = self._get_server_weights()
        if weights is None and self._extra:
            weights = self.scheme.model
        for scheme in self._extra:
            scheme.send(self._maybe_map_weights(weights))
        return super().push_weights(weights, worker_ids)


class RayWeightUpdater(WeightUpdaterBase):
    """Sends new weights to Ray actors (each with an ``update_weights(weights, version)``).

    Args:
        policy_weights: the weights to push when none are given (a TensorDict, state dict or
            module).
        remote_collectors: the actors; ``None``: the registered ``RayCollector``'s.
        max_interval: kept for TorchRL compatibility (the collector's
            ``max_weight_update_interval`` decides).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Tanh())  # Pendulum's sizes
        >>> policy = TensorDictModule(net, ["observation"], ["action"])
        >>> updater = RayWeightUpdater(policy_weights=TensorDict.from_module(policy))
        >>> updater.owns_scheme  # no actors given: it sends through its collector's scheme
        False

        Given to a :class:`~torchrl.collectors.distributed.RayCollector`, which starts Ray:

        >>> from torchrl.collectors.distributed import RayCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = RayCollector(  # doctest: +SKIP
        ...     [PendulumEnv], policy, frames_per_batch=20, total_frames=40,
        ...     weight_updater=updater,
        ... )
        >>> updater.push_weights()  # doctest: +SKIP
        1
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        policy_weights: Any = None,
        remote_collectors: Sequence[Any] | None = None,
        max_interval: int = 0,
    ) -> None:
        scheme = None
        if remote_collectors is not None:
            scheme = RayWeightSyncScheme()
            scheme.init_on_sender(policy_weights, actors=list(remote_collectors))
        super().__init__(scheme)
        self.policy_weights = policy_weights
        self.max_interval = max_interval

    def _get_server_weights(self) -> Any:
        return self.policy_weights
