"""Random network distillation: the loss that trains the predictor of an ``RNDTransform``.

Burda et al., "Exploration by Random Network Distillation" (2018). The error itself is
:func:`torchrl.envs.transforms.rnd.rnd_prediction_error`, shared with the transform that turns
it into an intrinsic reward during collection.
"""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import dispatch
from torch import Tensor, nn

from torchrl._keys import NEXT, OBSERVATION
from torchrl._types import NestedKey
from torchrl.envs.transforms.rnd import RunningMeanStd, rnd_prediction_error
from torchrl.objectives._helpers import check_reduction, reduce_loss
from torchrl.objectives.common import LossModule

__all__ = ["RNDLoss"]


class RNDLoss(LossModule):
    """Trains an RND predictor: the mean squared error against a frozen random network.

    Reads the next observations of a batch (``observation`` key, default
    ``("next", "observation")``), normalizes them with ``obs_rms`` when given (clipped to
    ``[-obs_clip, obs_clip]``), and returns ``loss_rnd``, the predictor's squared error averaged
    over the feature dims and reduced over the batch. Pass the **same** networks as the
    :class:`~torchrl.envs.transforms.RNDTransform` that writes the intrinsic reward, and its
    ``obs_rms`` (made at the transform's first step), so that training here lowers the reward
    of familiar states during collection. The target's parameters are frozen here.

    Args:
        predictor_network: the trained network.
        target_network: the fixed random network, with the same output shape.
        obs_rms: running observation statistics shared with the transform (read only).
        obs_clip: the clip of normalized observations.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (``loss_rnd`` then has shape ``[*B]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torch import nn
        >>> loss = RNDLoss(nn.Linear(3, 8), nn.Linear(3, 8))
        >>> data = TensorDict({("next", "observation"): torch.randn(4, 3)}, batch_size=[4])
        >>> out = loss(data)
        >>> out["loss_rnd"].shape, bool(out["loss_rnd"] > 0)
        (torch.Size([]), True)
        >>> loss.intrinsic_reward(data).shape
        torch.Size([4, 1])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`RNDLoss`.

        Attributes:
            observation: the observation the networks read (default: the next one).
        """

        observation: NestedKey = (NEXT, OBSERVATION)

    default_keys = _AcceptedKeys
    out_keys = ["loss_rnd"]
    predictor_network: nn.Module
    target_network: nn.Module

    def __init__(
        self,
        predictor_network: nn.Module,
        target_network: nn.Module,
        *,
        obs_rms: RunningMeanStd | None = None,
        obs_clip: float = 5.0,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if not isinstance(predictor_network, nn.Module) or not isinstance(
            target_network, nn.Module
        ):
            raise TypeError("RNDLoss: predictor_network and target_network must be nn.Modules")
        if predictor_network is target_network:
            raise ValueError("RNDLoss: the predictor and the target must be distinct networks")
        if obs_rms is not None and not isinstance(obs_rms, RunningMeanStd):
            raise TypeError(f"RNDLoss: obs_rms must be a RunningMeanStd, got {type(obs_rms)}")
        if obs_clip <= 0:
            raise ValueError(f"RNDLoss: obs_clip must be positive, got {obs_clip}")
        for p in target_network.parameters():
            p.requires_grad_(False)
        self.predictor_network = predictor_network
        self.target_network = target_network
        self.obs_rms = obs_rms
        self.obs_clip = float(obs_clip)
        self.reduction = check_reduction(reduction)
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [self.tensor_keys.observation]

    def _error(self, tensordict: TensorDictBase) -> Tensor:
        self._check_inputs(tensordict)
        return rnd_prediction_error(
            self.predictor_network,
            self.target_network,
            tensordict.get(self.tensor_keys.observation),
            tensordict.batch_dims,
            self.obs_rms,
            self.obs_clip,
        )

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_rnd``.

        Args:
            tensordict: a batch ``[*B]`` holding the observation.

        Returns:
            A TensorDict with ``loss_rnd`` (gradients reach the predictor only).
        """
        return TensorDict(
            {"loss_rnd": reduce_loss(self._error(tensordict), self.reduction)}, batch_size=[]
        )

    @torch.no_grad()
    def intrinsic_reward(self, tensordict: TensorDictBase) -> Tensor:
        """The un-normalized intrinsic reward of a batch: the prediction error, no gradients.

        Useful to (re)compute the bonus of stored data; during collection the
        :class:`~torchrl.envs.transforms.RNDTransform` writes it (and can normalize it).

        Args:
            tensordict: a batch ``[*B]`` holding the observation.

        Returns:
            The reward, shaped ``[*B, 1]``.
        """
        return self._error(tensordict).unsqueeze(-1)
