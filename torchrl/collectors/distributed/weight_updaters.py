"""TorchRL's older updaters of the RPC and ``torch.distributed`` collectors, over their schemes.

Both send through the ``"policy"`` scheme of the collector they are registered with (an
:class:`~torchrl.weight_update.RPCWeightSyncScheme` or a
:class:`~torchrl.weight_update.DistributedWeightSyncScheme`, whose transports reach the
workers); their constructor arguments are kept for TorchRL compatibility.
"""

from __future__ import annotations

from typing import Any

from torchrl.collectors.weight_updaters import WeightUpdaterBase

__all__ = ["DistributedWeightUpdater", "RPCWeightUpdater"]


class RPCWeightUpdater(WeightUpdaterBase):
    """Pushes weights to an ``RPCCollector``'s workers through its RPC scheme.

    Args:
        collector_infos: kept for TorchRL compatibility (the collector knows its workers).
        collector_class: kept for TorchRL compatibility.
        collector_rrefs: kept for TorchRL compatibility.
        policy_weights: the weights to push when none are given (default: the policy's).
        num_workers: kept for TorchRL compatibility.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Tanh())  # Pendulum's sizes
        >>> policy = TensorDictModule(net, ["observation"], ["action"])
        >>> updater = RPCWeightUpdater(policy_weights=TensorDict.from_module(policy))
        >>> updater.push_weights()  # not registered with a collector yet
        Traceback (most recent call last):
        ...
        RuntimeError: RPCWeightUpdater has no targets: give it its weights/workers, or pass it to a collector as weight_updater=

        Given to an :class:`~torchrl.collectors.distributed.RPCCollector` (which starts the
        RPC workers), it pushes through the collector's RPC scheme:

        >>> from torchrl.collectors.distributed import RPCCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = RPCCollector(  # doctest: +SKIP
        ...     PendulumEnv, policy, frames_per_batch=20, total_frames=40, num_workers=2,
        ...     weight_updater=updater,
        ... )
        >>> updater.push_weights()  # doctest: +SKIP
        1
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        collector_infos: Any = None,
        collector_class: Any = None,
        collector_rrefs: Any = None,
        policy_weights: Any = None,
        num_workers: int | None = None,
    ) -> None:
        super().__init__()
        self.collector_infos = collector_infos
        self.collector_class = collector_class
        self.collector_rrefs = collector_rrefs
        self.policy_weights = policy_weights
        self.num_workers = num_workers

    def _get_server_weights(self) -> Any:
        return self.policy_weights


class DistributedWeightUpdater(WeightUpdaterBase):
    """Pushes weights to a ``DistributedDataCollector``'s workers through its group.

    Args:
        store: kept for TorchRL compatibility (the collector owns its store).
        policy_weights: the weights to push when none are given (default: the policy's).
        num_workers: kept for TorchRL compatibility.
        sync: kept for TorchRL compatibility (the collector's ``sync`` decides).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Tanh())  # Pendulum's sizes
        >>> policy = TensorDictModule(net, ["observation"], ["action"])
        >>> updater = DistributedWeightUpdater(policy_weights=TensorDict.from_module(policy))
        >>> updater.collector is None  # registered by the collector it is given to
        True

        Given to a :class:`~torchrl.collectors.distributed.DistributedDataCollector` (which
        starts the workers and their gloo group), it pushes through the collector's scheme:

        >>> from torchrl.collectors.distributed import DistributedDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = DistributedDataCollector(  # doctest: +SKIP
        ...     PendulumEnv, policy, num_workers=2, launcher="mp", frames_per_batch=20,
        ...     total_frames=40, weight_updater=updater,
        ... )
        >>> updater.push_weights()  # doctest: +SKIP
        1
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Any = None,
        policy_weights: Any = None,
        num_workers: int | None = None,
        sync: bool = True,
    ) -> None:
        super().__init__()
        self.store = store
        self.policy_weights = policy_weights
        self.num_workers = num_workers
        self.sync = sync

    def _get_server_weights(self) -> Any:
        return self.policy_weights
