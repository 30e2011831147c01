"""Learners and learner groups: who owns the optimization work, and how several learners stay
in step.

A :class:`Learner` owns a loss module, its optimizer (through an optimization stepper), an
optional target-network updater and the replay data it samples; it runs bounded rounds of
optimizer steps and hands out versioned policy weights. A :class:`LearnerGroup` is what a
controller (a training loop) talks to: it numbers the rounds, checks that every rank did the
same work, and returns averaged metrics. :class:`LocalLearnerGroup` runs one or several learners
in this process; with several, each rank samples a shard of every global batch and gradients
are averaged across ranks before each optimizer step (data parallelism), so every rank holds the
same parameters.

Four frozen records carry the control messages between these parts: :class:`LearnerContext`
(what a rank is built with), :class:`LearnerStepRequest` (a command), :class:`LearnerStepResult`
(a receipt) and :class:`LearnerWeights` (a versioned snapshot of a model's weights). The data
itself (samples, metrics, weights) stays in TensorDicts.
"""

from __future__ import annotations

import abc
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl.trainers.checkpoint import get_rng_states, set_rng_states
from torchrl.trainers.mixed_precision import MixedPrecisionOptimizationStepper
from torchrl.weight_update.weight_sync_schemes import WeightStrategy

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Learner",
    "LearnerContext",
    "LearnerGroup",
    "LearnerStepRequest",
    "LearnerStepResult",
    "LearnerWeights",
    "LocalLearnerGroup",
    "OptimizationContext",
]


def _check_positive_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be an int >= 1, got {value!r}")
    return value


# ------------------------------------------------------------------------------------ contracts
@runtime_checkable
class OptimizationContext(Protocol):
    """What an optimization stepper needs from its owner (a :class:`Learner`).

    ``loss_module`` maps a batch to a TensorDict of ``loss_*`` terms; ``sync_gradients``
    averages an optimizer's gradients across the owner's data-parallel ranks (a no-op with one
    rank) and is called by the stepper after back-propagation, before clipping and stepping;
    ``register_module`` adds an object with ``state_dict``/``load_state_dict`` to the owner's
    checkpoint.

    Examples:
        >>> import torch
        >>> class Owner:
        ...     def __init__(self, loss_module):
        ...         self.loss_module = loss_module
        ...         self.modules = {}
        ...     def sync_gradients(self, optimizer):
        ...         pass
        ...     def register_module(self, module_name, module):
        ...         self.modules[module_name] = module
        >>> isinstance(Owner(torch.nn.Linear(1, 1)), OptimizationContext)
        True
    """

    loss_module: Any

    def sync_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Averages the optimizer's gradients across ranks."""
        ...

    def register_module(self, module_name: str, module: Any) -> None:
        """Adds ``module`` to the owner's checkpoint under ``module_name``."""
        ...


class _GradientAllReduce:
    """Averages gradients across the ranks of one process (each rank runs in its own thread).

    Every rank calls :meth:`mean` with its tensors; the call returns when all ranks have, with
    the element-wise mean (a missing gradient counts as zeros). One failing rank aborts the
    barrier, so the others raise instead of waiting forever.
    """

    def __init__(self, world_size: int, timeout: float | None) -> None:
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size, timeout=timeout)
        self._slots: list[list[torch.Tensor | None] | None] = [None] * world_size
        self._result: list[torch.Tensor | None] = []

    def mean(self, rank: int, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._slots[rank] = tensors
        try:
            if self.barrier.wait() == 0:  # exactly one rank reduces
                self._result = self._reduce()
            self.barrier.wait()
            result = self._result
            self.barrier.wait()  # every rank has read before the next call overwrites
        except BaseException:
            self.barrier.abort()
            raise
        return result

    def _reduce(self) -> list[torch.Tensor | None]:
        slots = [s for s in self._slots if s is not None]
        lengths = {len(s) for s in slots}
        if len(slots) != self.world_size or len(lengths) != 1:
            raise RuntimeError(
                f"gradient averaging: the ranks hold different numbers of gradients {lengths}: "
                "every learner must optimize the same parameters"
            )
        out: list[torch.Tensor | None] = []
        for grads in zip(*slots, strict=True):
            present = [g for g in grads if g is not None]
            if not present:
                out.append(None)
                continue
            total = present[0].clone()
            for g in present[1:]:
                total.add_(g)
            out.append(total.div_(self.world_size))
        return out


class _RankReplayView:
    """One rank's view of a shared replay buffer: every rank asks for its shard of the same
    global batch, which one rank samples once all ranks have finished their previous step."""

    def __init__(self, buffer: Any, rank: int, world_size: int, shared: _SharedSampling) -> None:
        self.buffer = buffer
        self.rank = rank
        self.world_size = world_size
        self.shared = shared

    @property
    def batch_size(self) -> int | None:
        size = getattr(self.buffer, "batch_size", None)
        return None if size is None else int(size) // self.world_size

    def sample(self, batch_size: int) -> TensorDictBase:
        return self.shared.shard(self.rank, batch_size)

    @property
    def priority_key(self) -> Any:
        return getattr(self.buffer, "priority_key", None)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        with self.shared.lock:
            _update_priority(self.buffer, data)


class _SharedSampling:
    def __init__(self, buffer: Any, world_size: int, timeout: float | None) -> None:
        self.buffer = buffer
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size, timeout=timeout)
        self.lock = threading.Lock()
        self._shards: tuple[TensorDictBase, ...] = ()

    def shard(self, rank: int, per_rank: int) -> TensorDictBase:
        try:
            if self.barrier.wait() == 0:
                with self.lock:
                    batch = self.buffer.sample(per_rank * self.world_size)
                if not isinstance(batch, TensorDictBase):
                    raise TypeError(
                        f"LocalLearnerGroup: the replay buffer's sample() must return a "
                        f"TensorDict, got {type(batch).__name__}"
                    )
                self._shards = batch.split(per_rank, 0)
            self.barrier.wait()
            return self._shards[rank]
        except BaseException:
            self.barrier.abort()
            raise


# -------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class LearnerContext:
    """What one learner rank is built with: its place in the group and its live dependencies.

    Created once per rank when a group starts and passed to the learner factory; it stays with
    the rank (it is never sent back to the controller).

    Args:
        rank: this learner's rank, in ``[0, world_size)``.
        world_size: the number of learners in the group.
        device: where the learner's modules and batches live.
        replay_buffer: the data this rank samples (with several ranks, a view that returns this
            rank's shard of each global batch).
        seed: the group's seed, or ``None``.
        collective: the group's gradient-averaging collective (``None`` for a single rank).

    Examples:
        >>> ctx = LearnerContext()
        >>> ctx.rank, ctx.world_size, ctx.device
        (0, 1, device(type='cpu'))
    """

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    replay_buffer: Any = None
    seed: int | None = None
    collective: Any = None

    def __post_init__(self) -> None:
        _check_positive_int("LearnerContext", "world_size", self.world_size)
        if isinstance(self.rank, bool) or not isinstance(self.rank, int):
            raise ValueError(f"LearnerContext: rank must be an int, got {self.rank!r}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"LearnerContext: rank must lie in [0, {self.world_size}), got {self.rank}"
            )
        if self.world_size > 1 and self.collective is None:
            raise ValueError(
                f"LearnerContext: world_size={self.world_size} needs a gradient collective"
            )
        object.__setattr__(self, "device", torch.device(self.device))

    def sync_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Averages ``optimizer``'s gradients across the ranks (nothing with one rank).

        Args:
            optimizer: its parameters' ``.grad`` are replaced by the mean over ranks.
        """
        if self.world_size == 1:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        averaged = self.collective.mean(self.rank, [p.grad for p in params])
        for param, grad in zip(params, averaged, strict=True):
            if grad is None:
                continue
            if param.grad is None:
                param.grad = grad.clone()
            else:
                param.grad.copy_(grad)


@dataclass(frozen=True)
class LearnerStepRequest:
    """A command to every rank: run round ``round_id`` of ``num_steps`` optimizer steps on
    batches of ``global_batch_size`` items (summed over the ranks).

    The explicit round number lets a rank refuse a stale or repeated command before touching
    its optimizer.

    Args:
        round_id: the round's number (the first is 1; each next one adds 1).
        num_steps: optimizer steps in the round.
        global_batch_size: items per optimizer step, over all ranks.

    Examples:
        >>> LearnerStepRequest(round_id=1, num_steps=2, global_batch_size=64)
        LearnerStepRequest(round_id=1, num_steps=2, global_batch_size=64)
    """

    round_id: int
    num_steps: int
    global_batch_size: int

    def __post_init__(self) -> None:
        for name in ("round_id", "num_steps", "global_batch_size"):
            _check_positive_int("LearnerStepRequest", name, getattr(self, name))


@dataclass(frozen=True)
class LearnerStepResult:
    """A rank's receipt for a completed round: what it actually did.

    A group compares the receipts of all ranks (same round, same number of steps, same model
    version) before reporting the round as done.

    Args:
        round_id: the round completed.
        rank: the rank that completed it.
        optim_steps: optimizer steps taken in the round.
        model_version: the learner's model version after the round (optimizer steps so far).
        metrics: scalar metrics averaged over the round's steps (detached, on CPU).

    Examples:
        >>> from tensordict import TensorDict
        >>> result = LearnerStepResult(1, 0, 2, 2, TensorDict(loss=torch.tensor(0.5)))
        >>> result.model_version, result.metrics["loss"].item()
        (2, 0.5)
    """

    round_id: int
    rank: int
    optim_steps: int
    model_version: int
    metrics: TensorDictBase


@dataclass(frozen=True)
class LearnerWeights:
    """A snapshot of one model's weights with its name and version, ready to publish.

    Args:
        model_id: the model's name in the learner (e.g. ``"policy"``).
        version: the learner's model version the weights come from.
        weights: the weights, detached, on CPU, nested like the module.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> snapshot = LearnerWeights("policy", 3, TensorDict(weight=torch.ones(1, 2),
        ...     bias=torch.zeros(1)))
        >>> target = torch.nn.Linear(2, 1)
        >>> snapshot.apply_to(target)
        >>> target.weight.tolist(), snapshot.version
        ([[1.0, 1.0]], 3)
    """

    model_id: str
    version: int
    weights: TensorDictBase

    def apply_to(self, destination: nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Copies the weights into a module (or its tensors by name).

        Args:
            destination: a module with the same parameter names.
        """
        WeightStrategy().apply_weights(destination, self.weights)

    def publish(self, *receivers: Any) -> None:
        """Hands the weights to collectors (``update_policy_weights_``), weight-sync schemes
        set up as senders (``send``) or modules (copied in place).

        Args:
            *receivers: collectors, :class:`~torchrl.weight_update.WeightSyncScheme` senders
                or modules.

        Raises:
            TypeError: a receiver is none of these.
        """
        for receiver in receivers:
            if callable(getattr(receiver, "update_policy_weights_", None)):
                receiver.update_policy_weights_(self.weights)
            elif isinstance(receiver, nn.Module):
                self.apply_to(receiver)
            elif callable(getattr(receiver, "send", None)):
                receiver.send(self.weights)
            else:
                raise TypeError(
                    f"LearnerWeights.publish: cannot hand weights to a {type(receiver).__name__} "
                    "(expected a collector, a weight-sync scheme or a module)"
                )


# -------------------------------------------------------------------------------------- learner
class Learner:
    """Owns the optimization state of one rank and runs bounded rounds of optimizer steps.

    Each optimizer step samples a batch from ``replay_buffer``, hands it to the optimization
    stepper (which computes the loss and steps the optimizer), updates the buffer's priorities
    from what the loss wrote (for prioritized buffers) and steps the target-network updater.
    :attr:`model_version` counts optimizer steps; :meth:`get_weights` returns a named model's
    weights. A learner is an :class:`OptimizationContext`.

    Args:
        loss_module: maps a batch to ``loss_*`` terms (a :class:`~torchrl.objectives.LossModule`
            or any module doing so).
        replay_buffer: what :meth:`step` samples from (``sample(n)``; ``None``: only
            :meth:`optimize` on given batches).
        optimizer: builds the default stepper (a :class:`MixedPrecisionOptimizationStepper`
            without mixed precision) when ``optimization_stepper`` is not given.
        optimization_stepper: does one update per batch (``step(learner, batch)``).
        context: this rank's :class:`LearnerContext` (default: a single rank on the device of
            the loss module's parameters, the CPU when it has none).
        target_net_updater: stepped after each optimizer step (e.g.
            :class:`~torchrl.objectives.SoftUpdate`).
        clip_grad_norm: clip the total norm (the default stepper does only this).
        clip_norm: gradient-norm clipping of the default stepper (``None``: none).
        models: the models :meth:`get_weights` can return, by name; default ``{"policy": ...}``
            with the loss's ``actor_network`` or ``value_network`` (else the loss itself).
        update_replay_priority: write the priorities the loss put in the batch back to the
            buffer (when it has ``update_tensordict_priority``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss=((td["x"] - self.w) ** 2).mean())
        >>> buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)
        >>> _ = buffer.extend(TensorDict(x=torch.ones(16, 1), batch_size=[16]))
        >>> loss = Loss()
        >>> learner = Learner(loss, buffer, optimizer=torch.optim.SGD(loss.parameters(), lr=0.25),
        ...     models={"policy": loss}).initialize()
        >>> metrics = learner.step(num_steps=3)
        >>> learner.model_version, sorted(metrics.keys())
        (3, ['grad_norm', 'loss'])
        >>> round(learner.get_weights()["w"].item(), 3)
        0.875
    """

    def __init__(
        self,
        loss_module: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        replay_buffer: Any = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        optimization_stepper: Any = None,
        context: LearnerContext | None = None,
        target_net_updater: Any = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        models: Mapping[str, nn.Module] | None = None,
        update_replay_priority: bool = True,
    ) -> None:
        if not callable(loss_module):
            raise TypeError(
                f"Learner: loss_module must be callable (a LossModule), got "
                f"{type(loss_module).__name__}"
            )
        if replay_buffer is not None and not callable(getattr(replay_buffer, "sample", None)):
            raise TypeError(
                f"Learner: replay_buffer must have sample(batch_size), got "
                f"{type(replay_buffer).__name__}"
            )
        if target_net_updater is not None:
            if not callable(getattr(target_net_updater, "step", None)):
                raise TypeError(
                    f"Learner: target_net_updater must have step(), got "
                    f"{type(target_net_updater).__name__}"
                )
            owner = getattr(target_net_updater, "loss_module", loss_module)
            if owner is not loss_module:
                raise ValueError(
                    "Learner: target_net_updater was built for another loss module than the "
                    "learner's (each rank must update its own target networks)"
                )
        if optimization_stepper is None:
            if optimizer is None:
                raise ValueError("Learner: pass optimizer= or optimization_stepper=")
            if not clip_grad_norm and clip_norm is not None:
                raise ValueError(
                    "Learner: the default stepper clips the gradient norm only; for "
                    "clip_grad_norm=False (clipping each value) pass an optimization_stepper"
                )
            optimization_stepper = MixedPrecisionOptimizationStepper(optimizer, clip_norm=clip_norm)
        elif not callable(getattr(optimization_stepper, "step", None)):
            raise TypeError(
                f"Learner: optimization_stepper must have step(context, batch), got "
                f"{type(optimization_stepper).__name__}"
            )
        self.loss_module = loss_module
        self.replay_buffer = replay_buffer
        self.optimizer = optimizer
        self.optimization_stepper = optimization_stepper
        if context is None:
            params = loss_module.parameters() if isinstance(loss_module, nn.Module) else ()
            first = next(iter(params), None)
            context = LearnerContext(device=torch.device("cpu") if first is None else first.device)
        self.context = context
        self.target_net_updater = target_net_updater
        self.update_replay_priority = bool(update_replay_priority)
        if models is None:
            models = {"policy": _default_policy(loss_module)}
        for name, model in models.items():
            if not isinstance(model, nn.Module):
                raise TypeError(
                    f"Learner: models[{name!r}] must be an nn.Module, got {type(model).__name__}"
                )
        self.models = dict(models)
        self._modules: dict[str, Any] = {}
        self._model_version = 0
        self._last_round = 0
        self._initialized = False
        self._closed = False
        register = getattr(optimization_stepper, "register", None)
        if callable(register):
            register(self, "optimization_stepper")

    # -- OptimizationContext ----------------------------------------------------------------------
    def sync_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Averages ``optimizer``'s gradients across the learner ranks (see
        :meth:`LearnerContext.sync_gradients`)."""
        self.context.sync_gradients(optimizer)

    def register_module(self, module_name: str, module: Any) -> None:
        """Adds an object with ``state_dict``/``load_state_dict`` to the learner's checkpoint.

        Raises:
            KeyError: the name is taken.
            TypeError: the object has no ``state_dict``/``load_state_dict``.
        """
        if module_name in self._modules or module_name in _LEARNER_KEYS:
            raise KeyError(f"Learner: a module named {module_name!r} is already registered")
        if not (hasattr(module, "state_dict") and hasattr(module, "load_state_dict")):
            raise TypeError(
                f"Learner: {module_name!r} ({type(module).__name__}) has no "
                "state_dict/load_state_dict"
            )
        self._modules[module_name] = module

    # -- state ------------------------------------------------------------------------------------
    @property
    def model_version(self) -> int:
        """Optimizer steps taken so far (the version of the weights :meth:`get_weights` gives)."""
        return self._model_version

    @property
    def last_round(self) -> int:
        """The last round completed (0 before the first)."""
        return self._last_round

    def initialize(self) -> Self:
        """Makes the learner ready for commands; returns it.

        Raises:
            RuntimeError: the learner is closed, or it has several ranks and its stepper does
                not declare ``supports_data_parallel`` (it would not average gradients).
        """
        self._ensure_open()
        if self.context.world_size > 1 and not getattr(
            self.optimization_stepper, "supports_data_parallel", False
        ):
            raise RuntimeError(
                f"Learner: {type(self.optimization_stepper).__name__} does not declare "
                "supports_data_parallel=True; with several ranks the stepper must call "
                "context.sync_gradients(optimizer) before clipping and stepping"
            )
        self._initialized = True
        return self

    # -- optimization -----------------------------------------------------------------------------
    def optimize(self, batch: TensorDictBase) -> TensorDictBase:
        """One stepper call on ``batch``; the target networks move when the optimizer stepped.

        Args:
            batch: the (micro-)batch, moved to the learner's device.

        Returns:
            The stepper's metrics (detached).
        """
        self._ensure_ready()
        batch = batch.to(self.context.device)
        metrics = self.optimization_stepper.step(self, batch)
        if not isinstance(metrics, TensorDictBase):
            raise TypeError(
                f"Learner: the optimization stepper's step() must return a TensorDict, got "
                f"{type(metrics).__name__}"
            )
        if getattr(self.optimization_stepper, "last_step_applied", True):
            if self.target_net_updater is not None:
                self.target_net_updater.step()
            self._model_version += 1
        return metrics

    def execute(self, request: LearnerStepRequest) -> LearnerStepResult:
        """Runs the round ``request`` describes: ``num_steps`` times, sample this rank's share
        of ``global_batch_size`` items, optimize, update priorities.

        Args:
            request: the command; its ``round_id`` must follow :attr:`last_round`.

        Returns:
            This rank's receipt, with the scalar metrics averaged over the round.

        Raises:
            RuntimeError: a stale or skipped round, or no replay buffer to sample from.
            ValueError: ``global_batch_size`` does not split evenly over the ranks.
        """
        self._ensure_ready()
        if not isinstance(request, LearnerStepRequest):
            raise TypeError(
                f"Learner.execute: expected a LearnerStepRequest, got {type(request).__name__}"
            )
        if request.round_id != self._last_round + 1:
            raise RuntimeError(
                f"Learner: expected round_id={self._last_round + 1}, got {request.round_id} "
                "(a stale or repeated command)"
            )
        if self.replay_buffer is None:
            raise RuntimeError("Learner: no replay_buffer to sample from; use optimize(batch)")
        world = self.context.world_size
        if request.global_batch_size % world:
            raise ValueError(
                f"Learner: global_batch_size={request.global_batch_size} does not split evenly "
                f"over {world} ranks"
            )
        per_rank = request.global_batch_size // world
        averager = _MetricAverager()
        version_before = self._model_version
        for _ in range(request.num_steps):
            batch = self.replay_buffer.sample(per_rank)
            if not isinstance(batch, TensorDictBase):
                raise TypeError(
                    f"Learner: replay_buffer.sample() must return a TensorDict, got "
                    f"{type(batch).__name__}"
                )
            averager.add(self.optimize(batch))
            if self.update_replay_priority:
                _update_priority(self.replay_buffer, batch)
        self._last_round = request.round_id
        return LearnerStepResult(
            round_id=request.round_id,
            rank=self.context.rank,
            optim_steps=self._model_version - version_before,
            model_version=self._model_version,
            metrics=averager.mean(),
        )

    def step(self, num_steps: int = 1, *, batch_size: int | None = None) -> TensorDictBase:
        """Runs the next round: ``num_steps`` optimizer steps on sampled batches.

        Args:
            num_steps: optimizer steps (stepper calls).
            batch_size: items per step over all ranks; default: the buffer's ``batch_size``
                (times the number of ranks).

        Returns:
            The scalar metrics averaged over the steps (detached, on CPU).
        """
        if batch_size is None:
            per_rank = getattr(self.replay_buffer, "batch_size", None)
            if per_rank is None:
                raise ValueError(
                    "Learner.step: pass batch_size= (the replay buffer has no batch_size)"
                )
            batch_size = int(per_rank) * self.context.world_size
        request = LearnerStepRequest(self._last_round + 1, num_steps, batch_size)
        return self.execute(request).metrics

    # -- weights ----------------------------------------------------------------------------------
    def get_weights(
        self, model_id: str = "policy", *, expected_version: int | None = None
    ) -> TensorDictBase:
        """A detached CPU copy of a named model's weights.

        Args:
            model_id: a key of ``models``.
            expected_version: refuse unless the learner is at this model version.

        Raises:
            KeyError: an unknown model.
            RuntimeError: the version differs from ``expected_version``.
        """
        self._ensure_ready()
        if expected_version is not None and expected_version != self._model_version:
            raise RuntimeError(
                f"Learner: expected model_version={expected_version}, the learner is at "
                f"{self._model_version}"
            )
        try:
            model = self.models[model_id]
        except KeyError:
            raise KeyError(
                f"Learner: unknown model_id {model_id!r}; models: {sorted(self.models)}"
            ) from None
        weights = WeightStrategy("tensordict").extract_weights(model)
        assert isinstance(weights, TensorDictBase)
        return weights.to("cpu").clone()

    def fetch_weights(self, model_id: str = "policy") -> LearnerWeights:
        """:meth:`get_weights` with the model's name and version, ready to publish."""
        return LearnerWeights(model_id, self._model_version, self.get_weights(model_id))

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The loss module (online and target parameters), the registered modules (the
        stepper and its optimizer), the target updater's counter, the counters and the RNG
        states."""
        state: dict[str, Any] = {
            "loss_module": self.loss_module.state_dict()
            if isinstance(self.loss_module, nn.Module)
            else None,
            "modules": {name: m.state_dict() for name, m in self._modules.items()},
            "model_version": self._model_version,
            "last_round": self._last_round,
            "rng": get_rng_states(),
        }
        stepper_optimizer = getattr(self.optimization_stepper, "optimizer", None)
        if self.optimizer is not None and self.optimizer is not stepper_optimizer:
            state["optimizer"] = self.optimizer.state_dict()
        updater = self.target_net_updater
        if updater is not None and callable(getattr(updater, "state_dict", None)):
            state["target_net_updater"] = updater.state_dict()
        elif updater is not None and hasattr(updater, "counter"):
            state["target_net_updater"] = {"counter": updater.counter}
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict`.

        Raises:
            KeyError: the registered modules differ from the saved ones.
        """
        saved = state_dict["modules"]
        if set(saved) != set(self._modules):
            raise KeyError(
                f"Learner: the checkpoint's modules {sorted(saved)} differ from the registered "
                f"ones {sorted(self._modules)}"
            )
        if state_dict.get("loss_module") is not None and isinstance(self.loss_module, nn.Module):
            self.loss_module.load_state_dict(state_dict["loss_module"])
        for name, module in self._modules.items():
            module.load_state_dict(saved[name])
        if "optimizer" in state_dict and self.optimizer is not None:
            self.optimizer.load_state_dict(state_dict["optimizer"])
        updater_state = state_dict.get("target_net_updater")
        if updater_state is not None and self.target_net_updater is not None:
            if callable(getattr(self.target_net_updater, "load_state_dict", None)):
                self.target_net_updater.load_state_dict(updater_state)
            elif "counter" in updater_state:
                self.target_net_updater.counter = int(updater_state["counter"])
        self._model_version = int(state_dict["model_version"])
        self._last_round = int(state_dict["last_round"])
        if "rng" in state_dict:
            set_rng_states(state_dict["rng"])

    def close(self) -> None:
        """Refuses further commands (idempotent)."""
        self._closed = True

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError("Learner: closed")

    def _ensure_ready(self) -> None:
        self._ensure_open()
        if not self._initialized:
            raise RuntimeError("Learner: call initialize() before sending commands")

    def __repr__(self) -> str:
        return (
            f"Learner(rank={self.context.rank}, world_size={self.context.world_size}, "
            f"model_version={self._model_version}, last_round={self._last_round}, "
            f"models={sorted(self.models)})"
        )


_LEARNER_KEYS = frozenset({"loss_module", "model_version", "last_round", "rng", "optimizer"})


def _update_priority(buffer: Any, batch: TensorDictBase) -> None:
    """Writes the priorities the loss put in ``batch`` back into a buffer that takes them
    (a batch without the buffer's priority entry, e.g. from a loss that writes none, is left)."""
    key = getattr(buffer, "priority_key", None)
    update = getattr(buffer, "update_tensordict_priority", None)
    if key is not None and callable(update) and key in batch.keys(True):
        update(batch)


def _default_policy(loss_module: Any) -> nn.Module:
    for name in ("actor_network", "value_network"):
        network = getattr(loss_module, name, None)
        if isinstance(network, nn.Module):
            return network
    if isinstance(loss_module, nn.Module):
        return loss_module
    raise TypeError(
        "Learner: the loss module is not an nn.Module and has no actor_network/value_network: "
        "pass models={'policy': ...}"
    )


def _required_positional(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume (context)
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in params)


class _MetricAverager:
    """Means of scalar metrics over calls; a key counts only in the calls that report it (a
    stepper accumulating gradients reports ``grad_norm`` only when it steps)."""

    def __init__(self) -> None:
        self._sums: dict[Any, torch.Tensor] = {}
        self._counts: dict[Any, int] = {}

    def add(self, metrics: TensorDictBase) -> None:
        for key, value in metrics.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                continue
            value = value.detach().reshape(()).to("cpu", torch.float32)
            self._sums[key] = self._sums[key] + value if key in self._sums else value.clone()
            self._counts[key] = self._counts.get(key, 0) + 1

    def mean(self) -> TensorDictBase:
        out = TensorDict({}, batch_size=[], device="cpu")
        for key, total in self._sums.items():
            out.set(key, total / self._counts[key])
        return out


# -------------------------------------------------------------------------------------- groups
class LearnerGroup(abc.ABC):
    """The synchronisation boundary a controller talks to: one command reaches every rank.

    The group owns the round numbering, the global batch size and the check that every rank
    completed the same round; the controller only asks for optimizer steps and weights.

    Examples:
        >>> def optimize_and_publish(group, collector):
        ...     metrics = group.step(num_steps=2)
        ...     group.publish_weights(collector)
        ...     return metrics
    """

    @abc.abstractmethod
    def start(self) -> Self:
        """Builds and synchronises every rank; returns the group."""

    @abc.abstractmethod
    def step(self, num_steps: int = 1) -> TensorDictBase:
        """Runs the next round of ``num_steps`` optimizer steps on every rank; returns the
        metrics averaged over steps and ranks."""

    @abc.abstractmethod
    def get_weights(
        self, model_id: str = "policy", *, expected_version: int | None = None
    ) -> TensorDictBase:
        """Rank 0's weights of a named model (see :meth:`Learner.get_weights`)."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The group's and the learners' state."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict` into every rank."""

    @abc.abstractmethod
    def shutdown(self, timeout: float | None = None) -> None:
        """Stops every rank (idempotent)."""

    @property
    @abc.abstractmethod
    def is_alive(self) -> bool:
        """Whether every rank is up and no command failed."""

    @property
    @abc.abstractmethod
    def world_size(self) -> int:
        """The number of learner ranks."""

    @property
    @abc.abstractmethod
    def global_batch_size(self) -> int:
        """Items per optimizer step, over all ranks."""

    @property
    @abc.abstractmethod
    def last_round(self) -> int:
        """The last round completed by every rank."""

    @property
    @abc.abstractmethod
    def model_version(self) -> int:
        """The model version after the last completed round."""

    def fetch_weights(self, model_id: str = "policy") -> LearnerWeights:
        """Rank 0's weights of ``model_id`` with their version."""
        version = self.model_version
        return LearnerWeights(
            model_id, version, self.get_weights(model_id, expected_version=version)
        )

    def publish_weights(self, *receivers: Any, model_id: str = "policy") -> LearnerWeights:
        """Hands rank 0's current weights to collectors, weight-sync schemes or modules (see
        :meth:`LearnerWeights.publish`); returns the snapshot sent."""
        weights = self.fetch_weights(model_id)
        weights.publish(*receivers)
        return weights

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()


class LocalLearnerGroup(LearnerGroup):
    """One or several learners in this process behind the learner-group contract.

    ``learner_factory(context)`` builds each rank's :class:`Learner` from its
    :class:`LearnerContext` (pass ``context.replay_buffer`` and ``context`` on to the learner).
    With ``world_size > 1`` the ranks run in threads: for each optimizer step one global batch
    of ``global_batch_size`` items is sampled and split into equal shards, each rank computes
    gradients on its shard, the gradients are averaged across ranks, and every rank takes the
    same optimizer step (rank 0's initial parameters are copied to all ranks at
    :meth:`start`). A failing rank fails the round for all and the group: build a new one and
    load the last checkpoint.

    Args:
        learner_factory: builds a learner from a :class:`LearnerContext`; a factory with two
            required arguments gets ``(context.replay_buffer, context)``, as TorchRL's does.
        replay_buffer: the shared buffer the ranks sample from.
        global_batch_size: items per optimizer step over all ranks (a multiple of
            ``world_size``).
        world_size: the number of learners.
        device: the learners' device.
        seed: seeds torch before the learners are built (rank ``r`` with ``seed + r``).
        timeout: seconds a rank waits for the others at a synchronisation point before the
            round fails (``None``: forever).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
        >>> _ = buffer.extend(TensorDict(x=torch.ones(8, 1), batch_size=[8]))
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss=((td["x"] - self.w) ** 2).mean())
        >>> def make_learner(context):
        ...     loss = Loss()
        ...     return Learner(loss, context.replay_buffer, context=context, models={"policy": loss},
        ...         optimizer=torch.optim.SGD(loss.parameters(), lr=0.25))
        >>> with LocalLearnerGroup(make_learner, buffer, global_batch_size=4, world_size=2) as group:
        ...     metrics = group.step(num_steps=2)
        ...     snapshot = group.fetch_weights()
        ...     print(group.last_round, snapshot.version, round(snapshot.weights["w"].item(), 2))
        1 2 0.75
    """

    def __init__(
        self,
        learner_factory: Callable[..., Learner],
        replay_buffer: Any,
        *,
        global_batch_size: int,
        world_size: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        timeout: float | None = 300.0,
    ) -> None:
        if not callable(learner_factory):
            raise TypeError(
                f"LocalLearnerGroup: learner_factory must be callable, got "
                f"{type(learner_factory).__name__}"
            )
        _check_positive_int("LocalLearnerGroup", "global_batch_size", global_batch_size)
        _check_positive_int("LocalLearnerGroup", "world_size", world_size)
        if global_batch_size % world_size:
            raise ValueError(
                f"LocalLearnerGroup: global_batch_size={global_batch_size} is not a multiple of "
                f"world_size={world_size}"
            )
        self.learner_factory = learner_factory
        self._factory_arity = _required_positional(learner_factory)
        if self._factory_arity not in (1, 2):
            raise TypeError(
                "LocalLearnerGroup: learner_factory must take (context) or (replay_buffer, "
                f"context), got one with {self._factory_arity} required positional arguments"
            )
        self.replay_buffer = replay_buffer
        self._global_batch_size = global_batch_size
        self._world_size = world_size
        self.device = torch.device(device)
        self.seed = seed
        self.timeout = timeout
        self._learners: list[Learner] = []
        self._executor: ThreadPoolExecutor | None = None
        self._barriers: list[threading.Barrier] = []
        self._failed: BaseException | None = None

    # -- properties -------------------------------------------------------------------------------
    @property
    def learners(self) -> Sequence[Learner]:
        """The ranks' learners (empty before :meth:`start`)."""
        return tuple(self._learners)

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def global_batch_size(self) -> int:
        return self._global_batch_size

    @property
    def is_alive(self) -> bool:
        return bool(self._learners) and self._failed is None

    @property
    def last_round(self) -> int:
        return self._rank0().last_round

    @property
    def model_version(self) -> int:
        return self._rank0().model_version

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Self:
        """Builds the learners (once), copies rank 0's loss state to the other ranks."""
        if self._learners:
            return self
        collective = None
        shared = None
        if self._world_size > 1:
            collective = _GradientAllReduce(self._world_size, self.timeout)
            shared = _SharedSampling(self.replay_buffer, self._world_size, self.timeout)
            self._barriers = [collective.barrier, shared.barrier]
        learners = []
        for rank in range(self._world_size):
            if self.seed is not None:
                torch.manual_seed(self.seed + rank)
            buffer = (
                self.replay_buffer
                if shared is None
                else _RankReplayView(self.replay_buffer, rank, self._world_size, shared)
            )
            context = LearnerContext(
                rank=rank,
                world_size=self._world_size,
                device=self.device,
                replay_buffer=buffer,
                seed=self.seed,
                collective=collective,
            )
            learner = (
                self.learner_factory(context.replay_buffer, context)
                if self._factory_arity == 2
                else self.learner_factory(context)
            )
            if not isinstance(learner, Learner):
                raise TypeError(
                    f"LocalLearnerGroup: learner_factory must return a Learner, got "
                    f"{type(learner).__name__}"
                )
            if learner.context is not context:
                raise ValueError(
                    "LocalLearnerGroup: the factory must build the Learner with context=context"
                )
            learners.append(learner.initialize())
        if len(learners) > 1 and isinstance(learners[0].loss_module, nn.Module):
            # the broadcast of a data-parallel start: every rank begins from rank 0's state
            reference = learners[0].loss_module.state_dict()
            for learner in learners[1:]:
                assert isinstance(learner.loss_module, nn.Module)
                learner.loss_module.load_state_dict(reference)
        self._learners = learners
        if self._world_size > 1:
            self._executor = ThreadPoolExecutor(
                max_workers=self._world_size, thread_name_prefix="torchrl-learner"
            )
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        """Closes the learners and stops the rank threads (idempotent)."""
        for learner in self._learners:
            learner.close()
        self._learners = []
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- commands ---------------------------------------------------------------------------------
    def step(self, num_steps: int = 1) -> TensorDictBase:
        """Runs the next round on every rank and checks their receipts.

        Returns:
            The metrics averaged over the steps and the ranks.

        Raises:
            RuntimeError: the group is not started, or a previous round failed; a rank's error
                is re-raised (the group is then failed).
        """
        self._check_usable()
        request = LearnerStepRequest(self.last_round + 1, num_steps, self._global_batch_size)
        if self._executor is None:
            results = [self._run(self._learners[0], request)]
        else:
            futures = [self._executor.submit(self._run, lr, request) for lr in self._learners]
            errors: list[BaseException] = []
            results = []
            for future in futures:
                try:
                    results.append(future.result())
                except BaseException as err:  # noqa: BLE001 - re-raised below, first real one
                    errors.append(err)
            if errors:
                real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
                raise (real or errors)[0]
        self._check_receipts(request, results)
        averager = _MetricAverager()
        for result in results:
            averager.add(result.metrics)
        return averager.mean()

    def _run(self, learner: Learner, request: LearnerStepRequest) -> LearnerStepResult:
        try:
            return learner.execute(request)
        except BaseException as err:
            self._failed = err
            for barrier in self._barriers:  # wake the other ranks: they fail too
                barrier.abort()
            raise

    def _check_receipts(
        self, request: LearnerStepRequest, results: Sequence[LearnerStepResult]
    ) -> None:
        summary = {(r.round_id, r.optim_steps, r.model_version) for r in results}
        if len(summary) != 1 or next(iter(summary))[0] != request.round_id:
            self._failed = RuntimeError("inconsistent receipts")
            raise RuntimeError(
                f"LocalLearnerGroup: the ranks disagree on round {request.round_id}: "
                f"{[(r.rank, r.round_id, r.optim_steps, r.model_version) for r in results]}"
            )

    def get_weights(
        self, model_id: str = "policy", *, expected_version: int | None = None
    ) -> TensorDictBase:
        return self._rank0().get_weights(model_id, expected_version=expected_version)

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The group's shape and rank 0's learner state (every rank holds the same)."""
        return {
            "world_size": self._world_size,
            "global_batch_size": self._global_batch_size,
            "learner": self._rank0().state_dict(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads rank 0's saved state into every rank.

        Raises:
            ValueError: the world size or global batch size differs from the checkpoint's.
        """
        for name, mine in (
            ("world_size", self._world_size),
            ("global_batch_size", self._global_batch_size),
        ):
            if int(state_dict[name]) != mine:
                raise ValueError(
                    f"LocalLearnerGroup: the checkpoint has {name}={state_dict[name]}, this group "
                    f"{mine}"
                )
        for learner in self._learners or [self._rank0()]:
            learner.load_state_dict(state_dict["learner"])

    def _rank0(self) -> Learner:
        if not self._learners:
            raise RuntimeError("LocalLearnerGroup: not started (call start())")
        return self._learners[0]

    def _check_usable(self) -> None:
        self._rank0()
        if self._failed is not None:
            raise RuntimeError(
                "LocalLearnerGroup: a previous round failed "
                f"({type(self._failed).__name__}: {self._failed}); build a new group and load "
                "the last checkpoint"
            )

    def __repr__(self) -> str:
        return (
            f"LocalLearnerGroup(world_size={self._world_size}, global_batch_size="
            f"{self._global_batch_size}, started={bool(self._learners)})"
        )
