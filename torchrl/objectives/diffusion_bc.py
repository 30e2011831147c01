"""Diffusion behavioural cloning: the noise-prediction loss of Diffusion Policy (Chi et al., 2023)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch

from torchrl._keys import ACTION, OBSERVATION
from torchrl._types import NestedKey
from torchrl.objectives._helpers import check_reduction, reduce_loss
from torchrl.objectives.common import LossModule

__all__ = ["DiffusionBCLoss"]


class DiffusionBCLoss(LossModule):
    """Behavioural cloning of a diffusion policy: predict the noise added to expert actions.

    For each item a diffusion step ``t`` is drawn uniformly, the expert action is noised by the
    forward process (``sqrt(abar_t) * a + sqrt(1 - abar_t) * eps``), and the actor's network
    regresses ``eps``; ``loss_diffusion_bc`` is the squared error averaged over the action dims.

    Args:
        actor_network: a :class:`~torchrl.modules.DiffusionActor` (or a tensordict module whose
            ``.module`` has ``num_steps``, ``add_noise(action, t) -> (noisy, noise)`` and
            ``predict_noise(noisy, observation, t)``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per item, ``[*B]``).

    Keys (``set_keys``): ``action`` (the expert action, default ``"action"``) and
    ``observation`` (default: the actor's first in-key).

    Examples:
        >>> from torchrl.modules.tensordict_module.diffusion import DiffusionActor
        >>> actor = DiffusionActor(2, obs_dim=3, num_steps=10)
        >>> loss = DiffusionBCLoss(actor)
        >>> td = TensorDict(observation=torch.randn(8, 3), action=torch.randn(8, 2), batch_size=[8])
        >>> out = loss(td)
        >>> out["loss_diffusion_bc"].shape, out["loss_diffusion_bc"].requires_grad
        (torch.Size([]), True)
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`DiffusionBCLoss`."""

        action: NestedKey = ACTION
        observation: NestedKey = OBSERVATION

    default_keys = _AcceptedKeys
    out_keys = ["loss_diffusion_bc"]

    def __init__(self, actor_network: TensorDictModuleBase, *, reduction: str = "mean") -> None:
        super().__init__()
        ddpm = getattr(actor_network, "module", None)
        missing = [
            name for name in ("num_steps", "add_noise", "predict_noise") if not hasattr(ddpm, name)
        ]
        if missing:
            raise TypeError(
                "DiffusionBCLoss: actor_network.module must provide num_steps, add_noise and "
                f"predict_noise (a DiffusionActor does); {type(actor_network).__name__} lacks "
                f"{missing}"
            )
        self.convert_to_functional(actor_network, "actor_network")
        in_keys = list(getattr(actor_network, "in_keys", []))
        if len(in_keys) == 1:
            self._tensor_keys.observation = in_keys[0]
        out = list(getattr(actor_network, "out_keys", []))
        if out:
            self._tensor_keys.action = out[0]
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss_diffusion_bc"]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [self.tensor_keys.observation, self.tensor_keys.action]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_diffusion_bc``.

        Args:
            tensordict: a batch ``[*B]`` with observations ``[*B, obs_dim]`` and expert actions
                ``[*B, action_dim]``.

        Returns:
            A TensorDict with ``loss_diffusion_bc``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        observation = tensordict.get(keys.observation)
        action = tensordict.get(keys.action).detach()
        # duck-typed (checked in __init__): a DiffusionActor's DDPM module or a look-alike
        ddpm: Any = self.actor_network.module
        t = torch.randint(0, int(ddpm.num_steps), tensordict.batch_size, device=action.device)
        noisy, noise = ddpm.add_noise(action.to(observation.dtype), t)
        pred = ddpm.predict_noise(noisy, observation, t)
        if pred.shape != noise.shape:
            raise ValueError(
                f"DiffusionBCLoss: the score network predicted noise of shape "
                f"{tuple(pred.shape)} for actions of shape {tuple(noise.shape)}"
            )
        loss = (pred - noise).pow(2).flatten(tensordict.batch_dims).mean(-1)
        return TensorDict({"loss_diffusion_bc": reduce_loss(loss, self.reduction)}, batch_size=[])
