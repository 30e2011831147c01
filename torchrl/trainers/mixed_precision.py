"""``MixedPrecisionOptimizationStepper``: one optimizer update with autocast, loss scaling,
gradient accumulation and clipping, for a :class:`~torchrl.trainers.Trainer` or a
:class:`~torchrl.trainers.Learner`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from torchrl._types import NestedKey
from torchrl._utils import total_loss

if TYPE_CHECKING:
    from torchrl.trainers.learners import OptimizationContext

__all__ = ["MixedPrecisionOptimizationStepper"]

_LOW_PRECISION = (torch.bfloat16, torch.float16)


class MixedPrecisionOptimizationStepper:
    """One optimization step with mixed precision, gradient accumulation and clipping.

    Each call computes the loss of one micro-batch, back-propagates it (divided by
    ``gradient_accumulation_steps``) and, every ``gradient_accumulation_steps`` calls, clips the
    accumulated gradients, steps the optimizer and zeroes them. With ``mixed_precision=True``
    the networks run in ``autocast_dtype``: a loss with ``set_autocast`` (every
    :class:`~torchrl.objectives.LossModule`) gets it once, so only its networks run in low
    precision and targets, advantages and loss terms stay float32 (the networks then run so
    wherever they are called, a collector sharing them included; ``loss.set_autocast(None)``
    undoes it); any other loss module runs whole under :func:`torch.autocast`. With ``float16``, a :class:`torch.amp.GradScaler`
    scales the loss (a step whose gradients overflow is skipped and the scale lowered);
    ``bfloat16`` needs no scaler. Used two ways:

    - by a :class:`~torchrl.trainers.Learner` (or any :class:`OptimizationContext`):
      :meth:`step` computes the loss itself and averages gradients across learner ranks;
    - by a :class:`~torchrl.trainers.Trainer`: :meth:`register` puts it at the ``"optimizer"``
      hook point (build the trainer without ``optimizer=``), where :meth:`__call__` receives
      the losses the trainer computed. ``"grad_norm"`` comes only with the calls that step,
      and the trainer averages what it logs over all its optimization steps.

    Args:
        optimizer: the optimizer.
        mixed_precision: run the networks in ``autocast_dtype``.
        autocast_dtype: ``torch.bfloat16`` or ``torch.float16``.
        gradient_accumulation_steps: micro-batches per optimizer step.
        clip_norm: the total gradient norm is clipped to this (``None``: no clipping).
        device_type: ``"cuda"``, ``"cpu"``, ... of autocast and the scaler; default: the device
            of the optimizer's first parameter.
        loss_components: the loss entries to sum; default: every entry starting with
            ``"loss"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.ones(2))
        >>> stepper = MixedPrecisionOptimizationStepper(
        ...     torch.optim.SGD([w], lr=0.5), gradient_accumulation_steps=2, clip_norm=None)
        >>> out = stepper(TensorDict(loss=(w**2).sum()))  # 1 of 2: gradients accumulate
        >>> w.tolist(), "grad_norm" in out
        ([1.0, 1.0], False)
        >>> out = stepper(TensorDict(loss=(w**2).sum()))  # 2 of 2: the optimizer steps
        >>> w.tolist(), stepper.optimizer_steps
        ([0.0, 0.0], 1)
    """

    #: gradients are averaged across ranks (``context.sync_gradients``) before the scaler
    #: unscales them, before clipping and before stepping, so every rank steps identically.
    supports_data_parallel = True

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        mixed_precision: bool = False,
        autocast_dtype: torch.dtype = torch.bfloat16,
        gradient_accumulation_steps: int = 1,
        clip_norm: float | None = 1.0,
        device_type: str | None = None,
        loss_components: list[NestedKey] | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"MixedPrecisionOptimizationStepper: optimizer must be a torch optimizer, got "
                f"{type(optimizer).__name__}"
            )
        if autocast_dtype not in _LOW_PRECISION:
            raise ValueError(
                "MixedPrecisionOptimizationStepper: autocast_dtype must be torch.bfloat16 or "
                f"torch.float16, got {autocast_dtype!r}"
            )
        if (
            isinstance(gradient_accumulation_steps, bool)
            or not isinstance(gradient_accumulation_steps, int)
            or gradient_accumulation_steps < 1
        ):
            raise ValueError(
                "MixedPrecisionOptimizationStepper: gradient_accumulation_steps must be an int "
                f">= 1, got {gradient_accumulation_steps!r}"
            )
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(
                f"MixedPrecisionOptimizationStepper: clip_norm must be > 0 or None, got {clip_norm!r}"
            )
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        if not self.params:
            raise ValueError("MixedPrecisionOptimizationStepper: the optimizer has no parameters")
        self.mixed_precision = bool(mixed_precision)
        self.autocast_dtype = autocast_dtype
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.clip_norm = clip_norm
        self.device_type = device_type or self.params[0].device.type
        self.loss_components = list(loss_components) if loss_components is not None else None
        use_scaler = self.mixed_precision and autocast_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=use_scaler)
        self._micro_steps = 0
        self._optimizer_steps = 0
        self._skipped_steps = 0
        self._last_applied = False
        self._autocast_set_on: set[int] = set()

    # -- counters ---------------------------------------------------------------------------------
    @property
    def micro_steps(self) -> int:
        """Micro-batches back-propagated so far."""
        return self._micro_steps

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far (a float16 step skipped on overflow is not counted)."""
        return self._optimizer_steps

    @property
    def skipped_steps(self) -> int:
        """float16 steps skipped because the scaled gradients overflowed."""
        return self._skipped_steps

    @property
    def last_step_applied(self) -> bool:
        """Whether the last call stepped the optimizer (ended an accumulation window)."""
        return self._last_applied

    # -- registration -----------------------------------------------------------------------------
    def register(self, owner: Any, name: str = "optimization_stepper") -> None:
        """Attaches the stepper to a trainer or a learner.

        A :class:`~torchrl.trainers.Trainer` (anything with ``register_op``) gets it at its
        ``"optimizer"`` hook point and, with ``mixed_precision``, its loss is put under
        ``set_autocast``; any owner with ``register_module`` puts it in its checkpoint.

        Args:
            owner: the trainer or learner.
            name: the stepper's name in the owner's checkpoint.

        Raises:
            ValueError: the trainer already has an optimizer op, or ``mixed_precision`` is on
                and the trainer's loss has no ``set_autocast``.
        """
        if callable(getattr(owner, "register_op", None)):
            if owner.ops("optimizer"):
                raise ValueError(
                    "MixedPrecisionOptimizationStepper.register: the trainer already has an "
                    "'optimizer' op (an OptimizerHook?); build the Trainer without optimizer="
                )
            if self.mixed_precision:
                if not callable(getattr(owner.loss_module, "set_autocast", None)):
                    raise ValueError(
                        "MixedPrecisionOptimizationStepper.register: mixed_precision needs a loss "
                        f"with set_autocast (a LossModule), got {type(owner.loss_module).__name__}"
                    )
                self._autocast_loss(owner.loss_module)
            owner.register_op("optimizer", self)
        if callable(getattr(owner, "register_module", None)):
            owner.register_module(name, self)

    def _autocast_loss(self, loss_module: Any) -> bool:
        """Puts a loss with ``set_autocast`` under autocast once; ``False`` when it has none."""
        if not callable(getattr(loss_module, "set_autocast", None)):
            return False
        if id(loss_module) not in self._autocast_set_on:
            if getattr(loss_module, "autocast_dtype", None) is None:
                loss_module.set_autocast(self.autocast_dtype, self.device_type)
            self._autocast_set_on.add(id(loss_module))
        return True

    # -- stepping ---------------------------------------------------------------------------------
    def step(self, context: OptimizationContext, batch: TensorDictBase) -> TensorDictBase:
        """Computes ``context.loss_module(batch)`` and back-propagates it; steps the optimizer
        at the end of each accumulation window (gradients averaged with
        ``context.sync_gradients`` first).

        Args:
            context: the learner (loss module, gradient synchronisation).
            batch: the micro-batch.

        Returns:
            The detached loss terms, plus ``"grad_norm"`` (before clipping) when the optimizer
            stepped.
        """
        loss_module = context.loss_module
        if self.mixed_precision and not self._autocast_loss(loss_module):
            with torch.autocast(self.device_type, dtype=self.autocast_dtype):
                losses = loss_module(batch)
        else:
            losses = loss_module(batch)
        return self._backward_and_maybe_step(losses, context)

    def __call__(self, losses: TensorDictBase) -> TensorDictBase:
        """The trainer's ``"optimizer"`` op: back-propagates losses already computed (see
        :meth:`step`, without gradient synchronisation)."""
        return self._backward_and_maybe_step(losses, None)

    def _total(self, losses: TensorDictBase) -> torch.Tensor:
        # each term in float32 before the sum: autocast may have computed some in half
        return total_loss(
            losses,
            self.loss_components,
            owner="MixedPrecisionOptimizationStepper",
            option="loss components",
            dtype=torch.float32,
        )

    def _backward_and_maybe_step(
        self, losses: TensorDictBase, context: OptimizationContext | None
    ) -> TensorDictBase:
        total = self._total(losses)
        if self._micro_steps % self.gradient_accumulation_steps == 0:
            self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total / self.gradient_accumulation_steps).backward()
        self._micro_steps += 1
        out = losses.detach()
        self._last_applied = self._micro_steps % self.gradient_accumulation_steps == 0
        if not self._last_applied:
            return out
        if context is not None:
            context.sync_gradients(self.optimizer)
        # unscale before clipping, so the norm is that of the true gradients
        self.scaler.unscale_(self.optimizer)
        grads = [p for p in self.params if p.grad is not None]
        max_norm = self.clip_norm if self.clip_norm is not None else math.inf
        # clip_grad_norm_ with an infinite bound only measures the norm
        grad_norm = torch.nn.utils.clip_grad_norm_(grads, max_norm) if grads else torch.zeros(())
        scale_before = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.is_enabled() and self.scaler.get_scale() < scale_before:
            self._skipped_steps += 1  # inf/nan gradients: the scaler skipped this step
        else:
            self._optimizer_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        out.set("grad_norm", grad_norm.detach())
        return out

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer, the loss scaler and the step counters."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "micro_steps": self._micro_steps,
            "optimizer_steps": self._optimizer_steps,
            "skipped_steps": self._skipped_steps,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`."""
        self.optimizer.load_state_dict(state_dict["optimizer"])
        if state_dict.get("scaler"):
            self.scaler.load_state_dict(state_dict["scaler"])
        self._micro_steps = int(state_dict.get("micro_steps", 0))
        self._optimizer_steps = int(state_dict.get("optimizer_steps", 0))
        self._skipped_steps = int(state_dict.get("skipped_steps", 0))

    def __repr__(self) -> str:
        return (
            f"MixedPrecisionOptimizationStepper(mixed_precision={self.mixed_precision}, "
            f"autocast_dtype={self.autocast_dtype}, gradient_accumulation_steps="
            f"{self.gradient_accumulation_steps}, clip_norm={self.clip_norm}, "
            f"device_type={self.device_type!r})"
        )
