"""Generative adversarial imitation learning: the discriminator's loss and the reward it gives.

Ho & Ermon, "Generative Adversarial Imitation Learning" (2016). A discriminator ``D(s, a)`` is
trained to tell the collector's (the learning policy's) transitions from the expert's; the
policy is then trained by any RL loss on a reward made from ``D`` (:meth:`GAILLoss.reward`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import ACTION, OBSERVATION
from torchrl._types import NestedKey
from torchrl.objectives._helpers import check_reduction, reduce_loss
from torchrl.objectives.common import LossModule

__all__ = ["GAILLoss"]

GAILReward = Literal["logit", "neg_log"]
# Keeps log(D) and log(1 - D) finite when the discriminator saturates.
_EPS = 1e-6


class GAILLoss(LossModule):
    """The GAIL discriminator loss, with an optional gradient penalty.

    ``discriminator_network`` reads the expert keys (``expert_observation`` and/or
    ``expert_action``, by default ``"observation"`` and ``"action"``) and writes at
    ``discriminator_pred`` (default ``"d_logits"``) the probability, in ``(0, 1)``, that a
    transition comes from the collector rather than the expert (end it with a sigmoid). One
    input TensorDict ``[*B]`` holds ``B`` expert transitions and ``B`` collector transitions,
    the latter at ``collector_observation`` / ``collector_action``; both halves go through the
    discriminator in one call. As in the paper, the loss is the binary cross-entropy with label
    0 for expert and 1 for collector data, averaged over the ``2B`` samples::

        loss_i = -(log(1 - D(expert_i)) + log D(collector_i)) / 2

    With ``use_grad_penalty``, ``gp_lambda * (||grad_x D(x)||_2 - 1) ** 2`` at random
    interpolations ``x`` of the expert and collector inputs (one ``U(0, 1)`` weight per sample,
    drawn with ``torch.rand([B, 1])``) is added to ``loss`` and also returned, detached, as
    ``gp_loss``. Turn ``D`` into the policy's reward with :meth:`reward`.

    Args:
        discriminator_network: a TensorDict module writing a probability ``[*B, 1]``.
        use_grad_penalty: add the gradient penalty.
        gp_lambda: the weight of the gradient penalty.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (``loss`` then has shape ``[*B]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> disc = TensorDictModule(
        ...     nn.Sequential(nn.Linear(3, 1), nn.Sigmoid()), ["observation"], ["d_logits"]
        ... )
        >>> loss = GAILLoss(disc, use_grad_penalty=True)
        >>> data = TensorDict(
        ...     observation=torch.randn(8, 3), collector_observation=torch.randn(8, 3),
        ...     batch_size=[8],
        ... )
        >>> out = loss(data)
        >>> sorted(out.keys()), out["loss"].shape
        (['gp_loss', 'loss'], torch.Size([]))
        >>> loss.reward(data).shape
        torch.Size([8, 1])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`GAILLoss`.

        Attributes:
            expert_action: the expert's action (also what the discriminator reads).
            expert_observation: the expert's observation (also what the discriminator reads).
            collector_action: the collector's action.
            collector_observation: the collector's observation.
            discriminator_pred: the discriminator's output, ``P(collector)``.
        """

        expert_action: NestedKey = ACTION
        expert_observation: NestedKey = OBSERVATION
        collector_action: NestedKey = "collector_action"
        collector_observation: NestedKey = "collector_observation"
        discriminator_pred: NestedKey = "d_logits"

    default_keys = _AcceptedKeys
    out_keys = ["loss"]
    discriminator_network: TensorDictModuleBase

    def __init__(
        self,
        discriminator_network: TensorDictModuleBase,
        *,
        use_grad_penalty: bool = False,
        gp_lambda: float = 10.0,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if not hasattr(discriminator_network, "in_keys") or not hasattr(
            discriminator_network, "out_keys"
        ):
            raise TypeError(
                "GAILLoss: discriminator_network must be a TensorDict module (in_keys and "
                f"out_keys), got {type(discriminator_network).__name__}"
            )
        if gp_lambda < 0:
            raise ValueError(f"GAILLoss: gp_lambda must be >= 0, got {gp_lambda}")
        self.convert_to_functional(discriminator_network, "discriminator_network")
        self._adopt_out_key("discriminator_pred", discriminator_network)
        self.use_grad_penalty = bool(use_grad_penalty)
        self.gp_lambda = float(gp_lambda)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss", "gp_loss"] if self.use_grad_penalty else ["loss"]
        self._refresh_keys()

    def _input_pairs(self) -> list[tuple[NestedKey, NestedKey]]:
        """``(expert key, collector key)`` for each entry the discriminator reads."""
        keys = self.tensor_keys
        pairs = {
            keys.expert_observation: keys.collector_observation,
            keys.expert_action: keys.collector_action,
        }
        in_keys = list(self.discriminator_network.in_keys)
        unknown = [k for k in in_keys if k not in pairs]
        if unknown:
            raise ValueError(
                f"GAILLoss: the discriminator reads {unknown}, which are neither the expert "
                f"observation {keys.expert_observation!r} nor the expert action "
                f"{keys.expert_action!r} (rename them with set_keys)"
            )
        return [(k, pairs[k]) for k in in_keys]

    def _compute_in_keys(self) -> list[NestedKey]:
        # Lenient: a discriminator key that is not (yet) an expert key is listed as it is; the
        # call raises until set_keys names it (construction must not, so set_keys can follow).
        keys = self.tensor_keys
        pairs = {
            keys.expert_observation: keys.collector_observation,
            keys.expert_action: keys.collector_action,
        }
        out: list[NestedKey] = []
        for k in self.discriminator_network.in_keys:
            out += [k, pairs[k]] if k in pairs else [k]
        return out

    def _discriminate(self, inputs: TensorDictBase) -> Tensor:
        return self.discriminator_network(inputs).get(self.tensor_keys.discriminator_pred)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the discriminator loss (and the gradient penalty when enabled).

        Args:
            tensordict: ``[*B]`` expert data at the expert keys, collector data at the
                collector keys.

        Returns:
            A TensorDict with ``loss`` (including the penalty) and, with
            ``use_grad_penalty``, ``gp_loss`` (detached).
        """
        pairs = self._input_pairs()
        self._check_inputs(tensordict)
        batch = tensordict.batch_size
        flat = tensordict.reshape(-1)
        n = flat.shape[0]
        expert = {ek: flat.get(ek) for ek, _ in pairs}
        collector = {ek: flat.get(ck) for ek, ck in pairs}
        for ek, ck in pairs:
            if expert[ek].shape != collector[ek].shape:
                raise ValueError(
                    f"GAILLoss: expert {ek!r} has shape {tuple(expert[ek].shape)} but collector "
                    f"{ck!r} has shape {tuple(collector[ek].shape)}"
                )
        both = TensorDict(
            {k: torch.cat([expert[k], collector[k]], 0) for k in expert}, batch_size=[2 * n]
        )
        pred = self._discriminate(both).reshape(2 * n, -1).mean(-1)
        pred = pred.clamp(_EPS, 1 - _EPS)
        d_expert, d_collector = pred[:n], pred[n:]
        # Expert label 0, collector label 1 (the paper's convention).
        loss = -(torch.log1p(-d_expert) + torch.log(d_collector)) / 2
        out = {}
        if self.use_grad_penalty:
            gp = self._grad_penalty(expert, collector, n)
            loss = loss + gp
            out["gp_loss"] = reduce_loss(gp, self.reduction).detach()
            if self.reduction == "none":
                out["gp_loss"] = out["gp_loss"].reshape(batch)
        if self.reduction == "none":
            loss = loss.reshape(batch)
        out = {"loss": reduce_loss(loss, self.reduction), **out}
        return TensorDict(out, batch_size=[])

    def _grad_penalty(self, expert: dict, collector: dict, n: int) -> Tensor:
        """Per-sample ``gp_lambda * (||grad D(x)|| - 1)^2`` at interpolated inputs ``x``."""
        first = next(iter(expert.values()))
        alpha = torch.rand(n, 1, device=first.device, dtype=first.dtype)
        mixed = {}
        for k in expert:
            e, c = expert[k].to(first.dtype), collector[k].to(first.dtype)
            a = alpha.reshape(n, *([1] * (e.ndim - 1)))
            mixed[k] = (a * e + (1 - a) * c).detach().requires_grad_(True)
        pred = self._discriminate(TensorDict(mixed, batch_size=[n]))
        grads = torch.autograd.grad(pred.sum(), list(mixed.values()), create_graph=True)
        sq = sum(g.reshape(n, -1).pow(2).sum(-1) for g in grads)
        # A small floor keeps the gradient of the norm finite where D is flat.
        norm = torch.as_tensor(sq).add(1e-12).sqrt()
        return self.gp_lambda * (norm - 1).pow(2)

    @torch.no_grad()
    def reward(self, tensordict: TensorDictBase, kind: GAILReward = "logit") -> Tensor:
        """The reward the discriminator gives the policy's transitions (no gradients).

        The discriminator reads ``tensordict`` at its own in keys (the expert keys: collected
        batches use ``"observation"`` and ``"action"`` too). With ``D = P(collector)``:

        - ``"logit"``: ``log(1 - D) - log D``, positive where the transition looks like the
          expert's, negative where it does not; no built-in bonus for staying alive, so a
          task's episode length does not reward the policy by itself.
        - ``"neg_log"``: ``-log D`` (the paper's cost ``log D``, negated); always positive,
          which also rewards long episodes.

        Args:
            tensordict: ``[*B]`` transitions.
            kind: ``"logit"`` or ``"neg_log"``.

        Returns:
            The reward, shaped ``[*B, 1]``.
        """
        if kind not in ("logit", "neg_log"):
            raise ValueError(f"GAILLoss.reward: kind must be 'logit' or 'neg_log', got {kind!r}")
        in_keys = list(self.discriminator_network.in_keys)
        self._check_inputs(tensordict, in_keys)
        inputs = tensordict.select(*in_keys)
        pred = self._discriminate(inputs).reshape(*tensordict.batch_size, -1).mean(-1, True)
        pred = pred.clamp(_EPS, 1 - _EPS)
        if kind == "neg_log":
            return -pred.log()
        return torch.log1p(-pred) - pred.log()
