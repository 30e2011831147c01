"""Macro actions: a policy writes a target and a duration, the env runs low-level actions.

``MacroPrimitive`` names the primitives (``WAIT``, ``MOVE``); ``MacroAction`` and
``TargetMacroAction`` are the structured actions (TensorDicts with named entries) a policy
writes;
``MacroPrimitiveTransform`` expands one into a fixed-length sequence of low-level actions
(a linear interpolation from the current action to the target, then held), and, with
``execute=True``, runs that sequence through :class:`MultiAction` in one outer step.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import missing_key_error, unravel_key
from torchrl.envs.transforms.base import Compose, Transform
from torchrl.envs.transforms.policy import MultiAction

__all__ = ["MacroAction", "MacroPrimitive", "MacroPrimitiveTransform", "TargetMacroAction"]


class MacroPrimitive(IntEnum):
    """The primitives ``MacroPrimitiveTransform`` knows: hold the action, or move to a target.

    Examples:
        >>> from torchrl.envs.transforms import MacroPrimitive
        >>> int(MacroPrimitive.WAIT), int(MacroPrimitive.MOVE)
        (0, 1)
    """

    WAIT = 0
    MOVE = 1


def long_column(value: int | torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """``value`` as a long ``[*batch, 1]`` entry: how macro actions store modes and durations."""
    return torch.as_tensor(value, dtype=torch.long).expand(*batch, 1).clone()


class MacroAction(TensorDict):
    """A macro action: a primitive id (``mode``) and its duration (``steps``, ``settle_steps``).

    A TensorDict with those entries, each shaped ``[*batch, 1]`` (long), read back as
    attributes. Subclasses add the entries their transform reads (see
    :class:`TargetMacroAction`).

    Args:
        mode: the :class:`MacroPrimitive` ids.
        steps: the low-level steps of each primitive.
        settle_steps: the extra held steps.
        batch_size: the batch shape.
        device: the device (optional).
        names: the batch dim names (optional).

    Examples:
        >>> import torch
        >>> from torchrl.envs.transforms import MacroAction, MacroPrimitive
        >>> a = MacroAction.wait(steps=3, batch_size=[2])
        >>> a.mode.squeeze(-1), a.steps.squeeze(-1)
        (tensor([0, 0]), tensor([3, 3]))
    """

    def __init__(
        self,
        mode: torch.Tensor,
        steps: torch.Tensor,
        settle_steps: torch.Tensor,
        *,
        batch_size: Any,
        device: Any = None,
        names: Any = None,
        **extra: torch.Tensor,
    ) -> None:
        super().__init__(
            {"mode": mode, "steps": steps, "settle_steps": settle_steps, **extra},
            batch_size=batch_size,
            device=device,
            names=names,
        )

    @property
    def mode(self) -> torch.Tensor:
        """The primitive ids (``[*batch, 1]``)."""
        return self.get("mode")

    @property
    def steps(self) -> torch.Tensor:
        """The low-level steps of each primitive (``[*batch, 1]``)."""
        return self.get("steps")

    @property
    def settle_steps(self) -> torch.Tensor:
        """The extra held steps (``[*batch, 1]``)."""
        return self.get("settle_steps")

    @classmethod
    def wait(cls, *, steps: int = 1, settle_steps: int = 0, batch_size: Any = ()) -> MacroAction:
        """A ``WAIT`` action (hold the current low-level action).

        Args:
            steps: its duration in low-level steps.
            settle_steps: extra held steps.
            batch_size: the batch shape.

        Returns:
            The macro action.
        """
        batch = torch.Size(batch_size)
        return MacroAction(
            mode=long_column(int(MacroPrimitive.WAIT), batch),
            steps=long_column(steps, batch),
            settle_steps=long_column(settle_steps, batch),
            batch_size=batch,
        )


class TargetMacroAction(MacroAction):
    """A macro action with one ``target`` (for the plain transform: a low-level action).

    Args:
        mode: the :class:`MacroPrimitive` ids.
        steps: the low-level steps of each primitive.
        settle_steps: the extra held steps.
        target: the destination, ``[*batch, target_dim]``.
        batch_size: the batch shape.
        device: the device (optional).
        names: the batch dim names (optional).

    Examples:
        >>> import torch
        >>> from torchrl.envs.transforms import TargetMacroAction
        >>> a = TargetMacroAction.move(torch.ones(1, 4), steps=2)
        >>> a.target.shape, int(a.mode[0, 0])
        (torch.Size([1, 4]), 1)
    """

    def __init__(
        self,
        mode: torch.Tensor,
        steps: torch.Tensor,
        settle_steps: torch.Tensor,
        target: torch.Tensor,
        *,
        batch_size: Any,
        device: Any = None,
        names: Any = None,
    ) -> None:
        super().__init__(
            mode,
            steps,
            settle_steps,
            batch_size=batch_size,
            device=device,
            names=names,
            target=target,
        )

    @property
    def target(self) -> torch.Tensor:
        """The destination (``[*batch, target_dim]``)."""
        return self.get("target")

    @classmethod
    def move(
        cls, target: torch.Tensor, *, steps: int = 16, settle_steps: int = 0
    ) -> TargetMacroAction:
        """A ``MOVE`` towards ``target`` (shape ``[*batch, action_dim]``) in ``steps`` steps.

        Args:
            target: the destination.
            steps: the low-level steps taken to reach it.
            settle_steps: extra steps holding it.

        Returns:
            The macro action.
        """
        batch = target.shape[:-1]
        return TargetMacroAction(
            mode=long_column(int(MacroPrimitive.MOVE), batch),
            steps=long_column(steps, batch),
            settle_steps=long_column(settle_steps, batch),
            target=target,
            batch_size=batch,
        )


class MacroPrimitiveTransform(Transform):
    """Expands a macro action into ``macro_steps + settle_steps`` low-level actions.

    The inverse pass reads the macro action at ``action_key`` (a :class:`MacroAction`, a
    TensorDict with ``mode``/``target``/``steps``/``settle_steps``, or a plain tensor: a
    ``MOVE`` to that action) and writes the sequence ``[*B, T, action_dim]`` there. ``MOVE``
    goes linearly from :meth:`current_action` to the target in ``steps`` steps and holds it;
    ``WAIT`` holds the current action. With ``execute=True`` the constructor returns
    ``Compose(MultiAction(...), transform)``, which runs the sequence in one outer step.
    Subclasses change :meth:`_resolve` (what a target means), :meth:`current_action` and the
    policy-facing action spec.

    Args:
        action_key: the low-level action key (also where the macro action is written).
        macro_steps: the interpolated steps of a primitive.
        settle_steps: the held steps appended to each primitive.
        action_dim: the low-level action size (default: from the specs or the target).
        execute: return ``Compose(MultiAction(...), transform)``.
        multi_action_dim: the ``dim`` of that ``MultiAction``.
        stack_rewards: its ``stack_rewards``.
        stack_observations: its ``stack_observations``.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import MacroPrimitiveTransform, TargetMacroAction, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), MacroPrimitiveTransform(macro_steps=4, execute=True))
        >>> td = env.reset()
        >>> td["action"] = TargetMacroAction.move(torch.ones(1), steps=2)
        >>> env.step(td)["next", "reward"].shape  # 4 low-level steps
        torch.Size([4, 1])
        >>> check_env_specs(env)
    """

    def __new__(cls, *args: Any, execute: bool = False, **kwargs: Any) -> Any:
        if not execute:
            return super().__new__(cls)
        # A plain factory in disguise: TorchRL's documented constructor returns the pair.
        inner = super().__new__(cls)
        cls.__init__(inner, *args, execute=False, **kwargs)
        multi = MultiAction(
            dim=kwargs.get("multi_action_dim", 1),
            stack_rewards=kwargs.get("stack_rewards", True),
            stack_observations=kwargs.get("stack_observations", False),
            num_actions=inner.sequence_length,
        )
        return Compose(multi, inner)

    def __init__(
        self,
        action_key: NestedKey = ACTION,
        macro_steps: int = 16,
        settle_steps: int = 0,
        action_dim: int | None = None,
        *,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
    ) -> None:
        if macro_steps < 1 or settle_steps < 0:
            raise ValueError(
                f"MacroPrimitiveTransform: macro_steps must be >= 1 and settle_steps >= 0, got "
                f"{macro_steps} and {settle_steps}"
            )
        super().__init__()
        self.action_key = unravel_key(action_key)
        self.macro_steps = int(macro_steps)
        self.settle_steps = int(settle_steps)
        self.action_dim = action_dim
        self.multi_action_dim = int(multi_action_dim)

    @property
    def sequence_length(self) -> int:
        """``macro_steps + settle_steps``: the length of every emitted sequence."""
        return self.macro_steps + self.settle_steps

    # ------------------------------------------------------------------------ hooks
    def current_action(self, tensordict: TensorDictBase, action_dim: int) -> torch.Tensor:
        """The low-level action a primitive starts from (default: zeros).

        Args:
            tensordict: the step's input.
            action_dim: the low-level action size.

        Returns:
            A tensor ``[*batch, action_dim]``.
        """
        return torch.zeros(*tensordict.batch_size, action_dim, device=tensordict.device)

    def _resolve(
        self, macro: TensorDictBase, start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Maps a macro action to ``(start, target, steps, settle_steps)`` low-level tensors."""
        mode = macro.get("mode")
        target = macro.get("target", None)
        if target is None:
            target = start
        wait = (mode == int(MacroPrimitive.WAIT)).expand_as(target)
        unknown = (mode != int(MacroPrimitive.WAIT)) & (mode != int(MacroPrimitive.MOVE))
        if bool(unknown.any()):
            raise ValueError(
                f"MacroPrimitiveTransform: unknown primitive mode(s) "
                f"{sorted(set(mode[unknown].tolist()))}; known: {[int(m) for m in MacroPrimitive]}"
            )
        target = torch.where(wait, start, target.to(start.dtype))
        return start, target, macro.get("steps"), macro.get("settle_steps")

    # ------------------------------------------------------------------------ expansion
    def _action_dim(self, value: Any) -> int:
        if self.action_dim is not None:
            return int(self.action_dim)
        target = value.get("target", None) if isinstance(value, TensorDictBase) else value
        if isinstance(target, torch.Tensor):
            return int(target.shape[-1])
        parent = self.parent
        if parent is not None:
            return int(parent.full_action_spec[self.action_key].shape[-1])
        raise ValueError(
            "MacroPrimitiveTransform: cannot tell the low-level action size: pass action_dim"
        )

    def expand(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The low-level action sequence ``[*batch, T, action_dim]`` of ``tensordict``'s macro."""
        value = tensordict.get(self.action_key, None)
        if value is None:
            raise missing_key_error(self, self.action_key, tensordict)
        batch = tensordict.batch_size
        dim = self._action_dim(value)
        start = self.current_action(tensordict, dim)
        if isinstance(value, torch.Tensor):
            start, target = start, value.to(start.dtype)
            steps = torch.full((*batch, 1), self.macro_steps, dtype=torch.long)
            settle = torch.zeros((*batch, 1), dtype=torch.long)
        elif isinstance(value, TensorDictBase):
            for field in ("mode", "steps", "settle_steps"):
                if field not in value.keys():
                    raise KeyError(
                        f"MacroPrimitiveTransform: the macro action at {self.action_key!r} has "
                        f"no {field!r} entry (its keys: {list(value.keys())})"
                    )
            start, target, steps, settle = self._resolve(value, start)
        else:
            raise TypeError(
                f"MacroPrimitiveTransform: the action at {self.action_key!r} must be a macro "
                f"action or a tensor, got {type(value).__name__}"
            )
        if target.shape[-1] != dim:
            raise ValueError(
                f"MacroPrimitiveTransform: the target has {target.shape[-1]} features, the "
                f"low-level action {dim}"
            )
        steps = steps.to(torch.long).clamp(1, self.macro_steps)
        total = self.sequence_length
        if bool((steps + settle > total).any()):
            raise ValueError(
                f"MacroPrimitiveTransform: steps + settle_steps exceeds the sequence length "
                f"{total} (macro_steps={self.macro_steps}, settle_steps={self.settle_steps})"
            )
        # alpha[..., i] = min((i + 1) / steps, 1): the target is reached at step ``steps``.
        idx = torch.arange(1, total + 1, device=start.device, dtype=start.dtype)
        alpha = (idx / steps.to(start.dtype)).clamp(max=1.0).unsqueeze(-1)
        return start.unsqueeze(-2) + alpha * (target - start).unsqueeze(-2)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        sequence = self.expand(tensordict)
        tensordict.set(self.action_key, sequence)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Leaves ``tensordict`` alone (the expansion is the inverse pass: see :meth:`inv`)."""
        return tensordict

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        leaf = action_spec.get(self.action_key, None)
        if leaf is None or isinstance(leaf, Composite):
            raise KeyError(
                f"MacroPrimitiveTransform: the action spec has no leaf {self.action_key!r} "
                f"(its keys: {list(action_spec.keys(True, True))})"
            )
        batch = action_spec.shape
        device = leaf.device
        # The level below may be a MultiAction expecting sequences: the target is one action.
        target: TensorSpec = leaf
        if leaf.ndim == len(batch) + 2:
            target = leaf[(slice(None),) * len(batch) + (0,)]
        if not isinstance(target, Bounded):
            target = Unbounded(shape=target.shape, device=device, dtype=target.dtype)
        one = (*batch, 1)
        action_spec[self.action_key] = Composite(
            mode=Categorical(len(MacroPrimitive), shape=one, device=device),
            target=target,
            steps=Bounded(1, self.macro_steps, shape=one, device=device, dtype=torch.long),
            settle_steps=Bounded(0, self.settle_steps, shape=one, device=device, dtype=torch.long),
            shape=batch,
            device=device,
        )
        return action_spec

    def extra_repr(self) -> str:
        return (
            f"action_key={self.action_key!r}, macro_steps={self.macro_steps}, "
            f"settle_steps={self.settle_steps}"
        )
