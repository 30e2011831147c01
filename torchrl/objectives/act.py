"""ACT's loss: L1 reconstruction of the expert's action chunk plus ``beta`` times the CVAE's KL."""

from __future__ import annotations

import dataclasses

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch

from torchrl._keys import OBSERVATION
from torchrl._types import NestedKey
from torchrl.objectives._helpers import check_reduction, reduce_loss
from torchrl.objectives.common import LossModule

__all__ = ["ACTLoss"]

# The chunk entry an ACT network reads in training (the ACTModel contract).
ACTION_CHUNK = "action_chunk"


class ACTLoss(LossModule):
    """Action Chunking with Transformers (Zhao et al., 2023): ``|a_pred - a_chunk|_1 + beta * KL``.

    The actor reads the observation and the expert chunk (``"action_chunk"``, ``[*B, k, A]``)
    and writes ``"action_pred"`` (``[*B, k, A]``) and the posterior's ``"mu"`` and
    ``"log_var"`` (``[*B, latent]``): :class:`~torchrl.modules.ACTModel` in a
    :class:`~tensordict.nn.TensorDictModule`. The L1 error is averaged over the chunk's steps
    and action dims (steps flagged in an optional ``"action_is_pad"`` mask ``[*B, k]`` are left
    out; an actor that also reads that mask hides them from its encoder); the KL to
    ``N(0, I)`` is summed over the latent dims. The actor's other in-keys are read from the data.

    Returns ``loss_act`` (the training loss) and, detached for logging, ``loss_reconstruction``
    and ``loss_kl`` (so summing every ``loss_*`` entry still gives the right gradient).

    Args:
        actor_network: the ACT network as a tensordict module.
        kl_weight: ``beta``, the weight of the KL term (10 in the paper).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per item, ``[*B]``).

    Keys (``set_keys``): ``observation``, ``action_chunk`` (the expert chunk in the data; it is
    given to the actor under its own chunk in-key), ``action_pred``, ``mu``, ``log_var``,
    ``action_is_pad``.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.models.act import ACTModel
        >>> net = ACTModel(obs_dim=3, action_dim=2, chunk_size=4, embed_dim=16, num_heads=2)
        >>> actor = TensorDictModule(
        ...     net, ["observation", "action_chunk"], ["action_pred", "mu", "log_var"])
        >>> td = TensorDict(observation=torch.randn(8, 3), action_chunk=torch.randn(8, 4, 2),
        ...                 batch_size=[8])
        >>> out = ACTLoss(actor)(td)
        >>> sorted(out.keys()), out["loss_act"].requires_grad
        (['loss_act', 'loss_kl', 'loss_reconstruction'], True)
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`ACTLoss`."""

        observation: NestedKey = OBSERVATION
        action_chunk: NestedKey = ACTION_CHUNK
        action_pred: NestedKey = "action_pred"
        mu: NestedKey = "mu"
        log_var: NestedKey = "log_var"
        action_is_pad: NestedKey = "action_is_pad"

    default_keys = _AcceptedKeys
    out_keys = ["loss_act", "loss_reconstruction", "loss_kl"]

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        kl_weight: float = 10.0,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if kl_weight < 0:
            raise ValueError(f"ACTLoss: kl_weight must be >= 0, got {kl_weight}")
        in_keys = list(getattr(actor_network, "in_keys", []))
        if ACTION_CHUNK not in in_keys:
            raise ValueError(
                f"ACTLoss: the actor must read the expert chunk at {ACTION_CHUNK!r} (its in_keys "
                f"are {in_keys})"
            )
        self.convert_to_functional(actor_network, "actor_network")
        self.kl_weight = float(kl_weight)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss_act", "loss_reconstruction", "loss_kl"]
        self._refresh_keys()

    def _actor_inputs(self) -> list[NestedKey]:
        return [k for k in self.actor_network.in_keys if k != ACTION_CHUNK]

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self._actor_inputs(), self.tensor_keys.action_chunk]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_act``, ``loss_reconstruction`` and ``loss_kl``.

        Args:
            tensordict: a batch ``[*B]`` with the actor's inputs and the expert chunks
                ``[*B, k, action_dim]``.

        Returns:
            A TensorDict with the three losses.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        target = tensordict.get(keys.action_chunk).detach()
        inputs = tensordict.select(*self._actor_inputs(), strict=False)
        inputs.set(ACTION_CHUNK, target)
        out = self.actor_network(inputs)
        pred, mu, log_var = out.get(keys.action_pred), out.get(keys.mu), out.get(keys.log_var)
        if pred.shape != target.shape:
            raise ValueError(
                f"ACTLoss: predicted chunks {tuple(pred.shape)} and expert chunks "
                f"{tuple(target.shape)} differ in shape"
            )
        batch_dims = tensordict.batch_dims
        error = (pred - target.to(pred.dtype)).abs().mean(-1)  # [*B, k]
        error = error.flatten(batch_dims)
        pad = tensordict.get(keys.action_is_pad, None)
        if pad is None:
            recon = error.mean(-1)
        else:
            valid = (~pad.bool()).reshape(error.shape).to(error.dtype)
            recon = (error * valid).sum(-1) / valid.sum(-1).clamp_min(1.0)
        kl = -0.5 * (1.0 + log_var - mu.pow(2) - log_var.exp())
        kl = kl.flatten(batch_dims).sum(-1)
        total = recon + self.kl_weight * kl
        return TensorDict(
            {
                "loss_act": reduce_loss(total, self.reduction),
                "loss_reconstruction": reduce_loss(recon, self.reduction).detach(),
                "loss_kl": reduce_loss(kl, self.reduction).detach(),
            },
            batch_size=[],
        )
