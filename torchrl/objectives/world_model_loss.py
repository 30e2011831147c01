"""``WorldModelLoss``: supervised losses of a generic world model on real transitions.

A :class:`~torchrl.modules.WorldModel` (encoder, dynamics, reward head, optional done head and
decoder) is fitted on a batch of real transitions: the predicted reward and done flag against
the data's, the decoded observation against the observation, and the predicted next latent
against the encoding of the next observation. For RSSM (variational) models use
:class:`~torchrl.objectives.DreamerModelLoss`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor
from torch.nn import functional as F

from torchrl._keys import DONE, NEXT, OBSERVATION, REWARD
from torchrl._types import NestedKey
from torchrl.objectives.common import LossModule, next_key
from torchrl.objectives.utils import distance_loss

__all__ = ["WorldModelLoss"]

WorldModelTerm = Literal["reward", "done", "reconstruction", "latent"]
_TERMS = ("reward", "done", "reconstruction", "latent")
_DISTANCES = ("l1", "l2", "smooth_l1")


class WorldModelLoss(LossModule):
    """Reward, done, reconstruction and next-latent losses of a world model on real transitions.

    The data's reward and done flag are moved to ``("next", "true_reward")`` and
    ``("next", "true_done")`` before the model runs, so it can write its predictions at
    ``("next", "reward")`` and ``("next", "done")``. Each requested term is the mean over every
    element of a distance, times its weight:

    - ``loss_reward``: ``d(("next", "reward"), ("next", "true_reward"))``;
    - ``loss_done``: ``d`` on the done flag as float, or ``"bce"``: the prediction is a logit;
    - ``loss_reconstruction``: ``d("reco_observation", "observation")``;
    - ``loss_latent``: ``d(("next", "latent"), sg(("next", "target_latent")))``; when the data
      has no target latent, the model's encoder is run (without gradients) on the next
      observation to give it.

    Args:
        world_model: the model, e.g. :class:`~torchrl.modules.WorldModel`.
        losses: which terms, any of ``"reward"``, ``"done"``, ``"reconstruction"``, ``"latent"``.
        reward_loss: ``"l1"``, ``"l2"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        done_loss: as ``reward_loss``, or ``"bce"`` (logits). Defaults to ``"l2"``.
        reconstruction_loss: as ``reward_loss``. Defaults to ``"l2"``.
        latent_loss: as ``reward_loss``. Defaults to ``"l2"``.
        lambda_reward: weight of the reward term. Defaults to 1.0.
        lambda_done: weight of the done term. Defaults to 1.0.
        lambda_reconstruction: weight of the reconstruction term. Defaults to 1.0.
        lambda_latent: weight of the latent term. Defaults to 1.0.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules import MLP, WorldModel
        >>> wm = WorldModel(
        ...     TensorDictModule(torch.nn.Linear(3, 4), ["observation"], ["latent"]),
        ...     TensorDictModule(MLP(in_features=5, out_features=4, depth=1), ["latent", "action"],
        ...         [("next", "latent")]),
        ...     TensorDictModule(torch.nn.Linear(4, 1), [("next", "latent")], [("next", "reward")]),
        ... )
        >>> data = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 1),
        ...     ("next", "observation"): torch.randn(8, 3), ("next", "reward"): torch.randn(8, 1)},
        ...     batch_size=[8])
        >>> losses = WorldModelLoss(wm, losses=["reward", "latent"])(data)
        >>> sorted(losses.keys())
        ['loss_latent', 'loss_reward']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read by the loss; rename with ``set_keys``.

        Attributes:
            reward: the reward (data, then prediction), under ``"next"``. Defaults to ``"reward"``.
            true_reward: where the data's reward is moved, under ``"next"``. Defaults to ``"true_reward"``.
            done: the done flag (data, then prediction), under ``"next"``. Defaults to ``"done"``.
            true_done: where the data's done flag is moved, under ``"next"``. Defaults to ``"true_done"``.
            observation: the observation to reconstruct. Defaults to ``"observation"``.
            reco_observation: the decoder's output. Defaults to ``"reco_observation"``.
            latent: the predicted next latent, under ``"next"``. Defaults to ``"latent"``.
            target_latent: the next latent's target, under ``"next"``. Defaults to ``"target_latent"``.
        """

        reward: NestedKey = REWARD
        true_reward: NestedKey = "true_reward"
        done: NestedKey = DONE
        true_done: NestedKey = "true_done"
        observation: NestedKey = OBSERVATION
        reco_observation: NestedKey = "reco_observation"
        latent: NestedKey = "latent"
        target_latent: NestedKey = "target_latent"

    default_keys = _AcceptedKeys

    def __init__(
        self,
        world_model: TensorDictModuleBase,
        losses: Sequence[WorldModelTerm] = ("reward",),
        *,
        reward_loss: Literal["l1", "l2", "smooth_l1"] = "l2",
        done_loss: Literal["l1", "l2", "smooth_l1", "bce"] = "l2",
        reconstruction_loss: Literal["l1", "l2", "smooth_l1"] = "l2",
        latent_loss: Literal["l1", "l2", "smooth_l1"] = "l2",
        lambda_reward: float = 1.0,
        lambda_done: float = 1.0,
        lambda_reconstruction: float = 1.0,
        lambda_latent: float = 1.0,
    ) -> None:
        super().__init__()
        if not hasattr(world_model, "in_keys"):
            raise TypeError(
                "WorldModelLoss: world_model must be a TensorDict module (with in_keys), got "
                f"{type(world_model).__name__}"
            )
        if isinstance(losses, str):
            losses = [losses]  # type: ignore[list-item]
        terms = list(dict.fromkeys(losses))
        unknown = [t for t in terms if t not in _TERMS]
        if unknown or not terms:
            raise ValueError(f"losses must be a non-empty subset of {list(_TERMS)}, got {losses!r}")
        for name, fn, allowed in (
            ("reward_loss", reward_loss, _DISTANCES),
            ("done_loss", done_loss, (*_DISTANCES, "bce")),
            ("reconstruction_loss", reconstruction_loss, _DISTANCES),
            ("latent_loss", latent_loss, _DISTANCES),
        ):
            if fn not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {fn!r}")
        if "reconstruction" in terms and getattr(world_model, "decoder", True) is None:
            raise ValueError("WorldModelLoss: 'reconstruction' needs a world model with a decoder")
        if "done" in terms and getattr(world_model, "done_head", True) is None:
            raise ValueError("WorldModelLoss: 'done' needs a world model with a done head")
        self.world_model = world_model
        self.losses = terms
        self.reward_loss = reward_loss
        self.done_loss = done_loss
        self.reconstruction_loss = reconstruction_loss
        self.latent_loss = latent_loss
        self.lambda_reward = lambda_reward
        self.lambda_done = lambda_done
        self.lambda_reconstruction = lambda_reconstruction
        self.lambda_latent = lambda_latent
        self.out_keys = [f"loss_{t}" for t in terms]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        renamed = {next_key(keys.true_reward), next_key(keys.true_done)}
        required = [k for k in self.world_model.in_keys if k not in renamed]
        if "reward" in self.losses:
            required.append(next_key(keys.reward))
        if "done" in self.losses:
            required.append(next_key(keys.done))
        if "reconstruction" in self.losses:
            required.append(keys.observation)
        return required

    def _output(self, td: TensorDictBase, key: NestedKey, what: str) -> Tensor:
        value = td.get(key, None)
        if value is None:
            raise KeyError(
                f"WorldModelLoss: the model wrote no {what} entry {key!r} (set the loss's key with "
                f"set_keys or check the model's out_keys); entries present: "
                f"{sorted(map(str, td.keys(True, True)))}"
            )
        return value

    def _target_latent(self, data: TensorDictBase) -> Tensor:
        keys = self.tensor_keys
        given = data.get(next_key(keys.target_latent), None)
        if given is not None:
            return given.detach()
        encoder = getattr(self.world_model, "encoder", None)
        next_td = data.get(NEXT, None)
        if encoder is None or next_td is None:
            raise KeyError(
                f"WorldModelLoss: 'latent' needs {next_key(keys.target_latent)!r} in the data, or "
                "a world model with an encoder and the next observation to encode"
            )
        missing = [k for k in encoder.in_keys if k not in next_td.keys(True)]
        if missing:
            raise KeyError(
                f"WorldModelLoss: encoding the next observation needs ('next', k) for k in "
                f"{missing}; or give {next_key(keys.target_latent)!r}"
            )
        with torch.no_grad():
            encoded = encoder(next_td.select(*encoder.in_keys).copy())
        return self._output(encoded, keys.latent, "encoded latent")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the world model on real transitions and computes the requested terms.

        Args:
            tensordict: ``[*B]`` transitions with the model's inputs and the targets.

        Returns:
            ``loss_<term>`` scalars.
        """
        self._check_inputs(tensordict)
        keys = self.tensor_keys
        data = tensordict.copy()
        for term, key, true_key in (
            ("reward", keys.reward, keys.true_reward),
            ("done", keys.done, keys.true_done),
        ):
            if next_key(key) in data.keys(True):
                data.rename_key_(next_key(key), next_key(true_key))
            elif term in self.losses:
                raise KeyError(f"WorldModelLoss: the data has no {next_key(key)!r} entry")
        target_latent = self._target_latent(data) if "latent" in self.losses else None
        data = self.world_model(data)
        out = TensorDict()
        if "reward" in self.losses:
            pred = self._output(data, next_key(keys.reward), "reward")
            true = data.get(next_key(keys.true_reward)).to(pred.dtype).reshape(pred.shape)
            out.set(
                "loss_reward",
                self.lambda_reward * distance_loss(pred, true, self.reward_loss).mean(),
            )
        if "done" in self.losses:
            pred = self._output(data, next_key(keys.done), "done")
            true = data.get(next_key(keys.true_done)).to(pred.dtype).reshape(pred.shape)
            if self.done_loss == "bce":
                done_term = F.binary_cross_entropy_with_logits(pred, true)
            else:
                done_term = distance_loss(pred, true, self.done_loss).mean()
            out.set("loss_done", self.lambda_done * done_term)
        if "reconstruction" in self.losses:
            pred = self._output(data, keys.reco_observation, "reconstruction")
            true = data.get(keys.observation).to(pred.dtype)
            reco_term = distance_loss(pred, true, self.reconstruction_loss).mean()
            out.set("loss_reconstruction", self.lambda_reconstruction * reco_term)
        if target_latent is not None:
            pred = self._output(data, next_key(keys.latent), "next latent")
            latent_term = distance_loss(pred, target_latent.to(pred.dtype), self.latent_loss)
            out.set("loss_latent", self.lambda_latent * latent_term.mean())
        return out
