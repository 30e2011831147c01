"""``make_update_step``: one gradient step (loss, backward, optimizer, target update) as a function.

Compiled, the whole step is one ``torch.compile`` graph. Three things stand in the way of that
graph with a plain loop, and this module works around each:

- ``Optimizer.step`` and ``Optimizer.zero_grad`` break a compiled graph on purpose. For
  :class:`torch.optim.Adam` and :class:`torch.optim.AdamW`, the step runs torch's functional
  ``adam`` (the same update) on the optimizer's own state and sets the gradients to ``None``,
  all inside the graph; the learning rate is read from a tensor, so schedulers keep working
  without recompiling.
- Dynamo breaks the graph at ``backward()`` unless ``trace_autograd_ops`` is on while it
  compiles: the step turns it on around its compiled call.
- Dynamo's guards check every attribute of every module the step reaches, at each call (~0.3 ms
  for a SAC loss on a small CPU). The default options skip them
  (``torch.compiler.skip_guard_on_all_nn_modules_unsafe``); a module changed after the first
  call is then not noticed (see :func:`make_update_step`).
"""

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torch.optim.adam import adam as _functional_adam

from torchrl._compile import maybe_compile
from torchrl._types import NestedKey
from torchrl.objectives.utils import SoftUpdate, total_loss

__all__ = ["make_update_step"]

# Added to the gradient norm before dividing, as torch.nn.utils.clip_grad_norm_ does.
_CLIP_EPS = 1e-6
# Calls made with dynamo's trace_autograd_ops on: the compiling ones (a recompilation after
# them, for a new batch size, breaks the graph at backward(): correct, a little slower).
_TRACED_CALLS = 2


def make_update_step(
    loss_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    target_updater: Any = None,
    *,
    compile: bool = False,
    compile_options: Mapping[str, Any] | None = None,
    loss_keys: Sequence[NestedKey] | None = None,
    max_grad_norm: float | None = None,
    return_losses: bool = True,
) -> Callable[[TensorDictBase], TensorDictBase | None]:
    """Returns ``step(batch)``: the loss, its backward, the optimizer step, the target update.

    Each call computes ``loss_module(batch)``, back-propagates the sum of the ``loss_keys``
    entries, clips the gradients' global norm to ``max_grad_norm`` (when given), steps the
    optimizer, sets the gradients to ``None`` and steps ``target_updater``. Gradients found on
    the parameters before a call are added to.

    With ``compile=True`` and :class:`~torch.optim.Adam` or :class:`~torch.optim.AdamW`, the
    whole step is one ``torch.compile`` graph (~1 against ~3 ms eager for the SAC step of
    ``examples/sac_pendulum.py`` on a CPU; ``docs/compile.rst``): Adam runs as torch's
    functional ``adam`` on the optimizer's own state (``state_dict()`` stays valid), reading
    each group's ``lr`` before every call (schedulers work without recompiling; the other
    hyper-parameters are read once). Another optimizer (or ``differentiable=True``) steps
    eagerly after the compiled gradients. A :class:`~torchrl.objectives.SoftUpdate` runs in the
    graph, other updaters eagerly. A failed compilation warns once and runs eagerly. The
    default options (inductor's ``cpp_wrapper``, no dynamo guards on modules) are only valid
    while no module changes after the first call: in-place parameter updates are fine, a
    swapped submodule or a changed setting is not seen. Steps for losses of the same structure
    share compiled code (a new run with new networks does not recompile).

    Args:
        loss_module: the loss, mapping a TensorDict batch to a TensorDict of loss terms.
        optimizer: the optimizer over (some of) ``loss_module``'s parameters.
        target_updater: an object with ``step()`` called after the optimizer step
            (:class:`~torchrl.objectives.SoftUpdate`, :class:`~torchrl.objectives.HardUpdate`),
            or ``None``.
        compile: compile the step with ``torch.compile``.
        compile_options: ``torch.compile`` keyword arguments, merged over the defaults above;
            ``"options"`` is merged key by key, and an option given as ``None`` removes the
            default (``{"options": {"guard_filter_fn": None}}`` keeps every guard).
        loss_keys: the entries summed before ``backward`` (default: every top-level entry
            whose name starts with ``"loss"``; see :func:`~torchrl.objectives.total_loss`).
        max_grad_norm: clip the global L2 norm of the gradients to this value (``None``: no
            clipping); the norm before clipping is returned as ``"grad_norm"``.
        return_losses: return the loss output; ``False`` returns ``None``, which saves a
            compiled step the output's TensorDict (~60 us a call for a SAC loss on a CPU).

    Returns:
        ``step(batch)``, returning ``loss_module(batch)`` detached (plus ``"grad_norm"``), or
        ``None`` with ``return_losses=False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss, SoftUpdate
        >>> loss = DQNLoss(QValueActor(torch.nn.Linear(3, 2), action_space="categorical"))
        >>> _ = loss.make_value_estimator(gamma=0.9)
        >>> optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
        >>> step = make_update_step(loss, optim, SoftUpdate(loss, tau=0.1), max_grad_norm=1.0)
        >>> batch = TensorDict({
        ...     "observation": torch.randn(4, 3), "action": torch.randint(2, (4,)),
        ...     "next": {"observation": torch.randn(4, 3), "reward": torch.randn(4, 1),
        ...              "done": torch.zeros(4, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(4, 1, dtype=torch.bool)}}, [4])
        >>> out = step(batch)
        >>> out["loss"].requires_grad, "grad_norm" in out.keys()
        (False, True)
    """
    owner = "make_update_step"
    if not isinstance(loss_module, nn.Module):
        raise TypeError(
            f"{owner}: loss_module must be an nn.Module, got {type(loss_module).__name__}"
        )
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"{owner}: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if target_updater is not None and not callable(getattr(target_updater, "step", None)):
        raise TypeError(
            f"{owner}: target_updater must have a step() method (SoftUpdate, HardUpdate) or be "
            f"None, got {type(target_updater).__name__}"
        )
    if compile_options is not None and not isinstance(compile_options, Mapping):
        raise TypeError(
            f"{owner}: compile_options must be a dict of torch.compile keyword arguments or "
            f"None, got {type(compile_options).__name__}"
        )
    if max_grad_norm is not None:
        if isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, (int, float)):
            raise TypeError(
                f"{owner}: max_grad_norm must be a number or None, "
                f"got {type(max_grad_norm).__name__}"
            )
        if not max_grad_norm > 0:
            raise ValueError(f"{owner}: max_grad_norm must be > 0, got {max_grad_norm}")
        max_grad_norm = float(max_grad_norm)
    keys = None if loss_keys is None else _check_loss_keys(loss_keys, owner)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    if not params:
        raise ValueError(f"{owner}: the optimizer holds no parameter that requires a gradient")

    if not compile:
        return _eager_step(
            loss_module, optimizer, target_updater, keys, max_grad_norm, params, return_losses
        )

    adam = _FunctionalAdam.maybe(optimizer)
    soft = isinstance(target_updater, SoftUpdate)

    def body(batch: TensorDictBase) -> TensorDictBase | None:
        losses = loss_module(batch)
        total_loss(losses, keys, owner="make_update_step", option="loss_keys").backward()
        norm = None if max_grad_norm is None else _clip_grad_norm(params, max_grad_norm)
        if adam is not None:
            adam.step()
        if soft:
            target_updater.step()
        return _output(losses, norm) if return_losses else None

    key = _structure_key(loss_module, optimizer, target_updater, keys, max_grad_norm, return_losses)
    body = _shared_code(body, key)
    compiled = maybe_compile(body, _compile_kwargs(compile_options), owner=owner)
    trace_backward = _trace_backward_patch()
    calls = [0]

    def step(batch: TensorDictBase) -> TensorDictBase | None:
        if adam is not None:
            adam.sync_lr()
            # What Optimizer.step records; lr schedulers warn when it is missing.
            optimizer._opt_called = True  # type: ignore[attr-defined]
        if calls[0] < _TRACED_CALLS:
            # The option matters while dynamo compiles, and costs ~30 us a call to set.
            calls[0] += 1
            with trace_backward():
                out = compiled(batch)
        else:
            out = compiled(batch)
        if adam is None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if target_updater is not None and not soft:
            target_updater.step()
        return out

    return step


def _eager_step(
    loss_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    target_updater: Any,
    keys: list[NestedKey] | None,
    max_grad_norm: float | None,
    params: list[Tensor],
    return_losses: bool,
) -> Callable[[TensorDictBase], TensorDictBase | None]:
    def step(batch: TensorDictBase) -> TensorDictBase | None:
        losses = loss_module(batch)
        total_loss(losses, keys, owner="make_update_step", option="loss_keys").backward()
        norm = None
        if max_grad_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if target_updater is not None:
            target_updater.step()
        return _output(losses, norm) if return_losses else None

    return step


def _output(losses: TensorDictBase, grad_norm: Tensor | None) -> TensorDictBase:
    out = losses.detach()
    if grad_norm is not None:
        out["grad_norm"] = grad_norm
    return out


def _check_loss_keys(loss_keys: Sequence[NestedKey], owner: str) -> list[NestedKey]:
    if isinstance(loss_keys, str) or not isinstance(loss_keys, Sequence):
        raise TypeError(
            f"{owner}: loss_keys must be a list of keys, got {type(loss_keys).__name__} "
            f"({loss_keys!r})"
        )
    keys = [k if isinstance(k, str) else tuple(k) for k in loss_keys]
    if not keys:
        raise ValueError(f"{owner}: loss_keys is empty: name at least one loss entry")
    return keys


@torch.no_grad()
def _clip_grad_norm(params: list[Tensor], max_norm: float) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` written with plain ops, which dynamo traces."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (norm + _CLIP_EPS), max=1.0)
    for g in grads:
        g.mul_(coef)
    return norm


class _FunctionalAdam:
    """``optimizer.step(); optimizer.zero_grad()`` for Adam/AdamW, in a form dynamo traces.

    Holds the parameters, the optimizer's state tensors (created as its first ``step`` would
    create them, unless they exist) and the hyper-parameters, not the optimizer: a compiled
    function that reads an optimizer object is tied to it and compiles again for each new one.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        # What the graph reads, per group: (param, exp_avg, exp_avg_sq, max_exp_avg_sq, step)
        # tuples, the lr tensor, amsgrad, the other hyper-parameters. Flat lists and tuples:
        # dynamo guards each dict it reads on its keys, at every call.
        self.groups: list[tuple[list[tuple[Tensor, ...]], Tensor, bool, dict[str, Any]]] = []
        # (param group, lr tensor, lr last copied), read outside the graph.
        self.lrs: list[list[Any]] = []
        decoupled_default = isinstance(optimizer, torch.optim.AdamW)
        for group in optimizer.param_groups:
            params = [p for p in group["params"] if p.requires_grad]
            if not params:
                continue
            device = params[0].device
            capturable = bool(group.get("capturable", False)) or device.type != "cpu"
            amsgrad = bool(group["amsgrad"])
            tensors: list[tuple[Tensor, ...]] = []
            for p in params:
                if not optimizer.state[p]:
                    optimizer.state[p] = self._new_state(p, amsgrad, capturable)
                state = optimizer.state[p]
                tensors.append(
                    (
                        p,
                        state["exp_avg"],
                        state["exp_avg_sq"],
                        state["max_exp_avg_sq"] if amsgrad else p,
                        state["step"],
                    )
                )
            lr = group["lr"]
            # A tensor the graph reads: a new learning rate (a scheduler) needs no recompile.
            lr_tensor = lr if isinstance(lr, Tensor) else torch.tensor(float(lr), device=device)
            beta1, beta2 = group["betas"]
            hyper: dict[str, Any] = {
                "beta1": float(beta1),
                "beta2": float(beta2),
                "weight_decay": float(group["weight_decay"]),
                "eps": float(group["eps"]),
                "maximize": bool(group.get("maximize", False)),
                "capturable": capturable,
                "decoupled_weight_decay": bool(
                    group.get("decoupled_weight_decay", decoupled_default)
                ),
            }
            self.groups.append((tensors, lr_tensor, amsgrad, hyper))
            self.lrs.append([group, lr_tensor, lr])

    @classmethod
    def maybe(cls, optimizer: torch.optim.Optimizer) -> _FunctionalAdam | None:
        """The functional form of ``optimizer``, or ``None`` where it has none here."""
        if not isinstance(optimizer, torch.optim.Adam):  # AdamW subclasses Adam
            return None
        if any(g.get("differentiable", False) for g in optimizer.param_groups):
            return None
        return cls(optimizer)

    @staticmethod
    def _new_state(p: Tensor, amsgrad: bool, capturable: bool) -> dict[str, Tensor]:
        state = {
            "step": torch.zeros((), dtype=torch.float32, device=p.device if capturable else None),
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }
        if amsgrad:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def sync_lr(self) -> None:
        """Copies each group's ``lr`` into the tensor the graph reads, where it changed."""
        for entry in self.lrs:
            group, lr_tensor, seen = entry
            lr = group["lr"]
            if lr is not seen and lr != seen:
                if isinstance(lr, Tensor):
                    lr_tensor.copy_(lr)
                else:
                    lr_tensor.fill_(float(lr))
                entry[2] = lr

    def step(self) -> None:
        for tensors, lr, amsgrad, hyper in self.groups:
            # Parameters without a gradient are skipped, as Optimizer.step does.
            live = [t for t in tensors if t[0].grad is not None]
            if live:
                with torch.no_grad():
                    _functional_adam(
                        [t[0] for t in live],
                        [cast(Tensor, t[0].grad) for t in live],
                        [t[1] for t in live],
                        [t[2] for t in live],
                        [t[3] for t in live] if amsgrad else [],
                        [t[4] for t in live],
                        foreach=False,
                        amsgrad=amsgrad,
                        lr=lr,
                        **hyper,
                    )
            for t in tensors:
                t[0].grad = None


def _compile_kwargs(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The default ``torch.compile`` arguments with ``user``'s merged over them."""
    options: dict[str, Any] = {}
    skip_module_guards = getattr(torch.compiler, "skip_guard_on_all_nn_modules_unsafe", None)
    if skip_module_guards is not None:  # absent from older torch releases
        options["guard_filter_fn"] = skip_module_guards
    kwargs: dict[str, Any] = {k: v for k, v in (user or {}).items() if k != "options"}
    backend = kwargs.get("backend", "inductor")
    if backend == "inductor" and "mode" not in kwargs:  # torch.compile takes mode or options
        options["cpp_wrapper"] = True
    user_options = (user or {}).get("options") or {}
    if not isinstance(user_options, Mapping):
        raise TypeError(
            f"make_update_step: compile_options['options'] must be a dict, "
            f"got {type(user_options).__name__}"
        )
    options.update(user_options)
    # A fresh dict on every call: torch.compile pops entries out of the one it is given.
    options = {k: v for k, v in options.items() if v is not None}
    if options:
        kwargs["options"] = options
    return kwargs


def _trace_backward_patch() -> Callable[[], contextlib.AbstractContextManager]:
    """A context manager factory turning on dynamo's ``trace_autograd_ops`` (where it exists)."""
    import torch._dynamo

    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return contextlib.nullcontext
    return lambda: torch._dynamo.config.patch(trace_autograd_ops=True)


# Dynamo caches compiled code per code object. With module guards skipped, a cache entry made
# for one loss would be taken for any other loss passed through the same code: every structure
# gets a code object of its own, and steps of the same structure share it (and its graphs).
_CODES: dict[Hashable, types.CodeType] = {}
_counter = itertools.count()


def _shared_code(fn: Callable[..., Any], key: Hashable) -> Callable[..., Any]:
    """``fn`` with the code object kept for ``key`` (a new one for a new key)."""
    assert isinstance(fn, types.FunctionType)
    code = _CODES.get(key)
    if code is None:
        code = fn.__code__.replace(co_name=f"update_step_{next(_counter)}")
        _CODES[key] = code
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _plain(value: Any) -> bool:
    if isinstance(value, (bool, int, float, str, type(None), torch.dtype, torch.device)):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return False


def _structure_key(
    loss_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    target_updater: Any,
    keys: list[NestedKey] | None,
    max_grad_norm: float | None,
    return_losses: bool,
) -> Hashable:
    """What a compiled step depends on beyond its tensors' values: the modules' types, their
    tensors' shapes, dtypes and devices, and their plain (number, string, flag) attributes."""
    modules = []
    for name, module in loss_module.named_modules():
        settings = tuple(sorted((k, repr(v)) for k, v in vars(module).items() if _plain(v)))
        modules.append((name, type(module), settings))
    tensors = tuple(
        (name, tuple(t.shape), t.dtype, t.device, t.requires_grad)
        for name, t in itertools.chain(
            loss_module.named_parameters(remove_duplicate=False),
            loss_module.named_buffers(remove_duplicate=False),
        )
    )
    groups = tuple(
        (
            tuple(tuple(p.shape) for p in g["params"]),
            tuple(sorted((k, repr(v)) for k, v in g.items() if k not in ("params", "lr"))),
        )
        for g in optimizer.param_groups
    )
    updater = (type(target_updater), repr(getattr(target_updater, "eps", None)))
    loss_keys = None if keys is None else tuple(keys)
    return (
        tuple(modules),
        tensors,
        type(optimizer),
        groups,
        updater,
        loss_keys,
        max_grad_norm,
        return_losses,
    )
