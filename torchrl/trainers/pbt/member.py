"""What a population member is, and an adapter that makes any ``Trainer`` one."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl.trainers.hooks import OptimizerHook
from torchrl.trainers.trainer import Trainer

__all__ = ["PBTMember", "TrainerMember", "set_loss_coefficient", "set_optimizer_lr"]


@runtime_checkable
class PBTMember(Protocol):
    """What population-based training needs from one member of the population.

    Any object with these four methods is a member; ``close()`` is called when it has one.
    :class:`TrainerMember` makes a :class:`~torchrl.trainers.Trainer` one.

    Examples:
        >>> class Quadratic:  # moves x toward 1 at the rate of its learning rate
        ...     def __init__(self, hparams, seed):
        ...         self.x, self.lr = 0.0, hparams["lr"]
        ...     def train(self, steps):
        ...         for _ in range(steps):
        ...             self.x += self.lr * (1.0 - self.x)
        ...         return -abs(1.0 - self.x)
        ...     def state_dict(self):
        ...         return {"x": self.x}
        ...     def load_state_dict(self, state):
        ...         self.x = state["x"]
        ...     def set_hparams(self, hparams):
        ...         self.lr = hparams["lr"]
        >>> isinstance(Quadratic({"lr": 0.1}, seed=0), PBTMember)
        True

        ``Quadratic`` is then the ``make_member`` of
        :class:`~torchrl.trainers.pbt.PopulationBasedTraining` (see its example).
    """

    def train(self, amount: int) -> float:
        """Trains for ``amount`` frames (or iterations) and returns a score (higher is better
        with ``mode="max"``)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Weights, optimizer state and whatever else a copy of this member needs."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Becomes a copy of the member whose :meth:`state_dict` this is."""
        ...

    def set_hparams(self, hparams: dict[str, Any]) -> None:
        """Applies new hyper-parameters in place (e.g. an optimizer's learning rate)."""
        ...


def set_optimizer_lr(
    optimizer: torch.optim.Optimizer, lr: float, *, group: int | None = None
) -> None:
    """Sets the learning rate of an optimizer in place (all param groups, or one).

    The optimizer's state (moments, step counts) is kept. A learning rate stored as a tensor
    (``capturable`` optimizers) is filled in place.

    Args:
        optimizer: the optimizer.
        lr: the new learning rate (``> 0``).
        group: the index of the param group to change; ``None`` changes all of them.

    Raises:
        ValueError: ``lr`` is not a finite number > 0.
        IndexError: ``group`` is not a param-group index.

    Examples:
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> opt = torch.optim.Adam([w], lr=1e-3)
        >>> set_optimizer_lr(opt, 5e-4)
        >>> opt.param_groups[0]["lr"]
        0.0005
    """
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"set_optimizer_lr: lr must be a finite number > 0, got {lr!r}")
    groups = optimizer.param_groups
    if group is not None:
        if not -len(groups) <= group < len(groups):
            raise IndexError(
                f"set_optimizer_lr: group {group} out of range ({len(groups)} param groups)"
            )
        groups = [groups[group]]
    for param_group in groups:
        if isinstance(param_group["lr"], torch.Tensor):
            param_group["lr"].fill_(float(lr))
        else:
            param_group["lr"] = float(lr)


def set_loss_coefficient(loss: nn.Module | Any, name: str, value: float) -> None:
    """Sets a loss module's coefficient (e.g. ``entropy_coef``) in place.

    A tensor attribute (a buffer) is filled in place, so modules holding a reference to it
    see the change; a number attribute is replaced.

    Args:
        loss: the loss module.
        name: the attribute's name.
        value: the new value.

    Raises:
        AttributeError: ``loss`` has no number or tensor attribute ``name``.

    Examples:
        >>> from torch import nn
        >>> loss = nn.Module()
        >>> loss.entropy_coef = 0.01
        >>> loss.register_buffer("beta", torch.tensor(1.0))
        >>> set_loss_coefficient(loss, "entropy_coef", 0.02)
        >>> set_loss_coefficient(loss, "beta", 0.5)
        >>> loss.entropy_coef, loss.beta.item()
        (0.02, 0.5)
    """
    current = getattr(loss, name, None)
    if isinstance(current, torch.Tensor):
        with torch.no_grad():
            current.fill_(float(value))
    elif isinstance(current, (int, float)) and not isinstance(current, bool):
        setattr(loss, name, type(current)(value) if isinstance(current, float) else value)
    else:
        raise AttributeError(
            f"set_loss_coefficient: {type(loss).__name__} has no number or tensor attribute "
            f"{name!r} (found {type(current).__name__})"
        )


class _HeldCollector:
    """Keeps a collector open and its iteration going across ``Trainer.train()`` calls.

    ``Trainer.train()`` iterates its collector from the start and shuts it down at the end; a
    member trains in rounds, so the adapter hands the trainer this wrapper: each iteration
    continues the inner one, and ``shutdown`` waits for :meth:`close`.
    """

    def __init__(self, collector: Any) -> None:
        self.inner = collector
        self._iterator: Iterator[TensorDictBase | None] | None = None
        self.exhausted = False

    def __iter__(self) -> Iterator[Any]:
        if self._iterator is None:
            self._iterator = iter(self.inner)
        # not ``yield from``: that would close the inner iterator when the trainer stops
        # iterating at the end of a round
        for batch in self._iterator:  # noqa: UP028
            yield batch
        self.exhausted = True

    @property
    def frames_per_batch(self) -> Any:
        return getattr(self.inner, "frames_per_batch", None)

    @property
    def init_random_frames(self) -> Any:
        return getattr(self.inner, "init_random_frames", 0)

    @property
    def policy(self) -> Any:
        return getattr(self.inner, "policy", None)

    def set_seed(self, seed: int) -> Any:
        set_seed = getattr(self.inner, "set_seed", None)
        return set_seed(seed) if callable(set_seed) else None

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.update_policy_weights_(*args, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        state_dict = getattr(self.inner, "state_dict", None)
        return state_dict() if callable(state_dict) else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        load = getattr(self.inner, "load_state_dict", None)
        if callable(load) and state_dict:
            load(state_dict)

    def shutdown(self) -> None:
        """Does nothing: the member closes the collector (:meth:`close`)."""

    def close(self) -> None:
        self._iterator = None
        shutdown = getattr(self.inner, "shutdown", None)
        if callable(shutdown):
            shutdown()


HParamSetter = Callable[[Trainer, Any], None]


class TrainerMember:
    """Makes a :class:`~torchrl.trainers.Trainer` a population member (:class:`PBTMember`).

    ``train(frames)`` runs the trainer for ``frames`` more frames and returns the latest
    value of ``score_key`` in ``trainer.latest_logs`` (e.g. ``"r_training"`` of a
    :class:`~torchrl.trainers.LogReward` hook), or ``score_fn(trainer)``. ``state_dict`` is the
    trainer's (loss and policy weights, optimizer, hooks, counters). Hyper-parameters are
    applied by ``hparam_setters`` (name -> ``setter(trainer, value)``); without a setter,
    ``"lr"`` sets the learning rate of every optimizer of the trainer's
    :class:`~torchrl.trainers.OptimizerHook` ops and any other name sets the loss module's
    attribute of that name (:func:`set_loss_coefficient`).

    The trainer's collector is wrapped so it stays open between rounds: build it with
    ``total_frames`` covering the whole PBT run. Disable the trainer's progress bar.

    Args:
        trainer: the trainer (its ``collector`` attribute is replaced by a wrapper).
        score_key: the ``latest_logs`` entry used as the score.
        score_fn: computes the score from the trainer instead (e.g. an evaluation).
        hparam_setters: per-name functions applying a hyper-parameter.

    Examples:
        >>> from tensordict import TensorDict
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss=((td["x"] - self.w) ** 2).mean())
        >>> batches = [TensorDict(x=torch.ones(4, 1), batch_size=[4]) for _ in range(10)]
        >>> loss = Loss()
        >>> trainer = Trainer(collector=batches, total_frames=40, optim_steps_per_batch=1,
        ...     loss_module=loss, optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        ...     progress_bar=False)
        >>> member = TrainerMember(trainer, score_fn=lambda t: -abs(1 - loss.w.item()))
        >>> member.set_hparams({"lr": 0.25})
        >>> round(member.train(8), 3), trainer.collected_frames
        (-0.25, 8)
        >>> round(member.train(4), 3), trainer.collected_frames
        (-0.125, 12)
    """

    def __init__(
        self,
        trainer: Trainer,
        *,
        score_key: str = "r_training",
        score_fn: Callable[[Trainer], float] | None = None,
        hparam_setters: Mapping[str, HParamSetter] | None = None,
    ) -> None:
        if not isinstance(trainer, Trainer):
            raise TypeError(f"TrainerMember: expected a Trainer, got {type(trainer).__name__}")
        if score_fn is not None and not callable(score_fn):
            raise TypeError(f"TrainerMember: score_fn must be callable, got {score_fn!r}")
        for name, setter in (hparam_setters or {}).items():
            if not callable(setter):
                raise TypeError(f"TrainerMember: hparam_setters[{name!r}] is not callable")
        self.trainer = trainer
        self.score_key = score_key
        self.score_fn = score_fn
        self.hparam_setters = dict(hparam_setters or {})
        self._collector = _HeldCollector(trainer.collector)
        trainer.collector = self._collector

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers of the trainer's :class:`~torchrl.trainers.OptimizerHook` ops."""
        return [
            op.optimizer for op in self.trainer.ops("optimizer") if isinstance(op, OptimizerHook)
        ]

    def train(self, amount: int) -> float:
        """Trains ``amount`` more frames; returns the score.

        Raises:
            RuntimeError: the collector ended before ``amount`` frames (its ``total_frames`` is
                too small), or no score was logged under ``score_key``.
        """
        trainer = self.trainer
        target = trainer.collected_frames + int(amount)
        trainer.total_frames = target
        trainer.train()
        if self._collector.exhausted and trainer.collected_frames < target:
            raise RuntimeError(
                f"TrainerMember: the collector ended at {trainer.collected_frames} frames, before "
                f"the {target} this round needs: build it with a larger total_frames"
            )
        if self.score_fn is not None:
            return float(self.score_fn(trainer))
        if self.score_key not in trainer.latest_logs:
            raise RuntimeError(
                f"TrainerMember: no score: {self.score_key!r} is not in trainer.latest_logs "
                f"(logged: {sorted(trainer.latest_logs)}); register a hook that logs it (e.g. "
                f"LogReward) or pass score_fn"
            )
        return float(trainer.latest_logs[self.score_key])

    def state_dict(self) -> dict[str, Any]:
        """The trainer's :meth:`~torchrl.trainers.Trainer.state_dict`."""
        return self.trainer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state from :meth:`state_dict` (possibly another member's)."""
        self.trainer.load_state_dict(state_dict)

    def set_hparams(self, hparams: dict[str, Any]) -> None:
        """Applies each hyper-parameter with its setter (see the class docstring).

        Raises:
            KeyError: a name has no setter and is neither ``"lr"`` nor an attribute of the loss.
        """
        for name, value in hparams.items():
            setter = self.hparam_setters.get(name)
            if setter is not None:
                setter(self.trainer, value)
            elif name == "lr":
                optimizers = self.optimizers()
                if not optimizers:
                    raise KeyError(
                        "TrainerMember: hyper-parameter 'lr' but the trainer has no OptimizerHook; "
                        "pass hparam_setters={'lr': ...}"
                    )
                for optimizer in optimizers:
                    set_optimizer_lr(optimizer, value)
            elif hasattr(self.trainer.loss_module, name):
                set_loss_coefficient(self.trainer.loss_module, name, value)
            else:
                raise KeyError(
                    f"TrainerMember: no way to apply hyper-parameter {name!r}: it is not 'lr', "
                    f"not an attribute of {type(self.trainer.loss_module).__name__}, and "
                    f"hparam_setters has no entry for it"
                )

    def close(self) -> None:
        """Shuts the collector down."""
        self._collector.close()
