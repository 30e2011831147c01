"""Dreamer (v1) losses: the world model, the actor trained in imagination, and the value model.

Reference: Hafner et al., "Dream to Control: Learning Behaviors by Latent Imagination" (2019),
https://arxiv.org/abs/1912.01603. Training alternates three objectives:

- :class:`DreamerModelLoss` fits the world model (encoder, RSSM, decoder, reward model) on
  real sequences ``[*B, T]``: reconstruction + reward prediction + KL(posterior || prior)
  with free nats;
- :class:`DreamerActorLoss` starts imagined rollouts of ``imagination_horizon`` steps from the
  posterior states of that batch in a model-based env (a
  :class:`~torchrl.envs.DreamerEnv`), and maximises the λ-returns of those rollouts by
  back-propagating through the (frozen) world model into the actor;
- :class:`DreamerValueLoss` regresses the value model on those λ-returns.

Each ``forward`` returns a pair ``(losses, data)``: the ``loss_*`` TensorDict and the data the
next loss reads (the model's outputs, then the imagined rollout with its ``"lambda_target"``).

Examples:
    The whole wiring on tiny shapes (state-based observations stored at ``"pixels"``; for
    images use conv ``ObsEncoder``/``ObsDecoder``). The world model filters real sequences;
    the imagination env steps the *same* prior and reward networks in place:

    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule, TensorDictSequential
    >>> from torchrl.data import Bounded
    >>> from torchrl.envs import DreamerEnv
    >>> from torchrl.modules import (MLP, DreamerActor, ObsDecoder, ObsEncoder, ProbabilisticActor,
    ...     RSSMPosterior, RSSMPrior, RSSMRollout, TanhNormal, ValueOperator)
    >>> from torchrl.modules.actors import WorldModelWrapper
    >>> S, H, A, O = 4, 6, 2, 3  # state, belief, action, observation sizes
    >>> prior = RSSMPrior(None, 8, H, S, action_dim=A)
    >>> posterior = RSSMPosterior(8, S, rnn_hidden_dim=H, obs_embed_dim=8)
    >>> reward_net = MLP(in_features=S + H, out_features=1, depth=1, num_cells=8)
    >>> world_model = WorldModelWrapper(TensorDictSequential(
    ...     TensorDictModule(ObsEncoder(obs_dim=O, num_layers=1, num_cells=8),
    ...         [("next", "pixels")], [("next", "encoded_latents")]),
    ...     RSSMRollout(
    ...         TensorDictModule(prior, ["state", "belief", "action"],
    ...             [("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")]),
    ...         TensorDictModule(posterior, [("next", "belief"), ("next", "encoded_latents")],
    ...             [("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")])),
    ...     TensorDictModule(ObsDecoder(obs_dim=O, latent_dim=S + H, num_layers=1, num_cells=8),
    ...         [("next", "state"), ("next", "belief")], [("next", "reco_pixels")]),
    ... ), TensorDictModule(reward_net, [("next", "state"), ("next", "belief")], [("next", "reward")]))
    >>> data = TensorDict({  # a replay-buffer sample: 2 sequences of 5 steps
    ...     "state": torch.zeros(2, 5, S), "belief": torch.zeros(2, 5, H),
    ...     "action": torch.rand(2, 5, A) * 2 - 1, ("next", "pixels"): torch.randn(2, 5, O),
    ...     ("next", "reward"): torch.randn(2, 5, 1)}, batch_size=[2, 5])
    >>> model_losses, data = DreamerModelLoss(world_model)(data)
    >>> env = DreamerEnv(WorldModelWrapper(
    ...     TensorDictModule(prior, ["state", "belief", "action"], ["_", "_", "state", "belief"]),
    ...     TensorDictModule(reward_net, ["state", "belief"], ["reward"])),
    ...     prior_shape=(S,), belief_shape=(H,), action_spec=Bounded(-1.0, 1.0, shape=(A,)))
    >>> actor = ProbabilisticActor(
    ...     TensorDictModule(DreamerActor(A, depth=1, num_cells=8, in_features=S + H),
    ...         ["state", "belief"], ["loc", "scale"]),
    ...     in_keys=["loc", "scale"], distribution_class=TanhNormal, spec=env.action_spec)
    >>> value = ValueOperator(MLP(in_features=S + H, out_features=1, depth=1, num_cells=8),
    ...     in_keys=["state", "belief"])
    >>> actor_losses, fake = DreamerActorLoss(actor, value, env, imagination_horizon=4)(data)
    >>> value_losses, _ = DreamerValueLoss(value)(fake)
    >>> fake.batch_size  # 2 * 5 start states, 4 imagined steps
    torch.Size([10, 4])
    >>> loss = sum(l for td in (model_losses, actor_losses, value_losses) for l in td.values())
    >>> loss.backward()
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor, nn

from torchrl._keys import DONE, NEXT, PIXELS, REWARD, STATE_VALUE, TERMINATED
from torchrl._types import NestedKey
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives.common import LossModule, next_key
from torchrl.objectives.utils import LossFunction, ValueEstimators, distance_loss, hold_out_net

__all__ = [
    "LAMBDA_TARGET",
    "DreamerActorLoss",
    "DreamerModelLoss",
    "DreamerValueLoss",
    "discount_weights",
    "gaussian_kl",
    "match_prediction",
    "model_output",
    "reduce_sequence_loss",
    "run_world_model",
]

#: The λ-return of each imagined step, written by the actor losses and read by the value losses.
LAMBDA_TARGET = "lambda_target"


def gaussian_kl(
    posterior_mean: Tensor, posterior_std: Tensor, prior_mean: Tensor, prior_std: Tensor
) -> Tensor:
    """Element-wise ``KL(N(posterior) || N(prior))`` of diagonal Gaussians (not summed).

    Args:
        posterior_mean: ``[..., D]`` means of the posterior.
        posterior_std: ``[..., D]`` standard deviations of the posterior.
        prior_mean: ``[..., D]`` means of the prior.
        prior_std: ``[..., D]`` standard deviations of the prior.

    Returns:
        ``[..., D]``: ``log(s_p / s_q) + (s_q**2 + (m_q - m_p)**2) / (2 s_p**2) - 1/2``.

    Examples:
        >>> gaussian_kl(torch.zeros(2), torch.ones(2), torch.zeros(2), torch.ones(2))
        tensor([0., 0.])
    """
    var_ratio = (posterior_std / prior_std).pow(2)
    mean_term = ((posterior_mean - prior_mean) / prior_std).pow(2)
    return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log())


def reduce_sequence_loss(loss: Tensor, batch_dims: int, global_average: bool = False) -> Tensor:
    """Reduces a per-element loss: sum over the event dims, mean over the ``batch_dims`` first dims.

    Args:
        loss: ``[*B, *E]`` per-element loss (``B`` batch and time dims, ``E`` event dims).
        batch_dims: ``len(B)``.
        global_average: average over every dim instead (event dims included).

    Returns:
        A scalar.

    Examples:
        >>> reduce_sequence_loss(torch.ones(2, 3, 4), batch_dims=2)
        tensor(4.)
        >>> reduce_sequence_loss(torch.ones(2, 3, 4), batch_dims=2, global_average=True)
        tensor(1.)
    """
    if global_average or loss.ndim <= batch_dims:
        return loss.mean()
    return loss.sum(tuple(range(batch_dims, loss.ndim))).mean()


def discount_weights(gamma: float | Tensor, like: Tensor, time_dim: int = -2) -> Tensor:
    """``gamma ** t`` along the time dim of ``like`` (1 at the first step): the discount of a step.

    Args:
        gamma: the discount.
        like: a tensor ``[*B, T, *F]`` whose shape, dtype and device the weights take.
        time_dim: the time dim of ``like``. Defaults to ``-2`` (rewards ``[*B, T, 1]``).

    Returns:
        A tensor shaped like ``like``.

    Examples:
        >>> discount_weights(0.5, torch.zeros(1, 3, 1)).squeeze()
        tensor([1.0000, 0.5000, 0.2500])
    """
    steps = like.shape[time_dim]
    exponents = torch.arange(steps, dtype=like.dtype, device=like.device)
    gamma_t = torch.as_tensor(gamma, dtype=like.dtype, device=like.device)
    weights = gamma_t.pow(exponents)
    view = [1] * like.ndim
    view[time_dim] = steps
    return weights.reshape(view).expand_as(like)


def match_prediction(loss: LossModule, target: Tensor, prediction: Tensor, what: str) -> Tensor:
    """``target`` in ``prediction``'s shape and dtype (``[*B, T]`` and ``[*B, T, 1]`` mix freely).

    Args:
        loss: the loss asking (its class name heads the error message).
        target: the regression target.
        prediction: the model's prediction.
        what: what the target is, for the error message (e.g. ``"reward"``).

    Returns:
        ``target`` reshaped to ``prediction.shape`` and cast to its dtype.

    Raises:
        ValueError: when the two hold different numbers of elements.

    Examples:
        >>> loss = DreamerModelLoss(_doctest_world_model()[0])
        >>> match_prediction(loss, torch.zeros(2, 3, dtype=torch.int64), torch.ones(2, 3, 1), "reward").shape
        torch.Size([2, 3, 1])
    """
    if target.shape != prediction.shape:
        if target.numel() != prediction.numel():
            raise ValueError(
                f"{type(loss).__name__}: the {what} target has shape {tuple(target.shape)} but the "
                f"prediction {tuple(prediction.shape)}"
            )
        target = target.reshape(prediction.shape)
    return target.to(prediction.dtype)


def model_output(loss: LossModule, td: TensorDictBase, key: NestedKey, what: str) -> Tensor:
    """The entry ``key`` a model wrote in ``td``, or a ``KeyError`` naming the loss and the key.

    Args:
        loss: the loss asking (its class name heads the error message).
        td: the model's output.
        key: the entry to read.
        what: what the entry is, for the error message (e.g. ``"reconstruction"``).

    Returns:
        The entry.

    Examples:
        >>> loss = DreamerModelLoss(_doctest_world_model()[0])
        >>> model_output(loss, TensorDict({"x": torch.zeros(2)}, [2]), "x", "value").shape
        torch.Size([2])
    """
    value = td.get(key, None)
    if value is None:
        raise KeyError(
            f"{type(loss).__name__}: the model wrote no {what} entry {key!r} (set the loss's key "
            f"with set_keys or check the model's out_keys); entries present: "
            f"{sorted(map(str, td.keys(True, True)))}"
        )
    return value


def run_world_model(
    world_model: TensorDictModuleBase,
    tensordict: TensorDictBase,
    reward: NestedKey,
    true_reward: NestedKey,
) -> TensorDictBase:
    """Runs a world model on a shallow copy of real data, keeping the data's reward aside.

    The data's ``("next", reward)`` is renamed to ``("next", true_reward)`` in the copy, so
    that the model can write its predicted reward under ``("next", reward)``; ``tensordict``
    itself is left as it was.

    Args:
        world_model: the world model (a TensorDict module).
        tensordict: the real ``[*B, T]`` sequences.
        reward: the reward key (under ``"next"``).
        true_reward: where the data's reward is moved to (under ``"next"``).

    Returns:
        The copy, with the model's outputs.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> model = TensorDictModule(lambda x: x * 2, [("next", "true_reward")], [("next", "reward")])
        >>> data = TensorDict({"next": {"reward": torch.ones(1, 2, 1)}}, [1, 2])
        >>> out = run_world_model(model, data, "reward", "true_reward")
        >>> out["next", "reward"].sum().item(), out["next", "true_reward"].sum().item()
        (4.0, 2.0)
    """
    data = tensordict.copy()
    data.rename_key_(next_key(reward), next_key(true_reward))
    return world_model(data)


class DreamerModelLoss(LossModule):
    """Dreamer's world-model loss: KL (with free nats) + reconstruction + reward prediction.

    On real sequences ``[*B, T]`` the world model (encoder, RSSM rollout, decoder and reward
    model, e.g. a :class:`~torchrl.modules.WorldModelWrapper`) writes, under ``"next"``, the
    prior and posterior Gaussians, the reconstructed observation and the predicted reward. The
    true reward is moved to ``("next", "true_reward")`` before the call so the model may write
    its prediction at ``("next", "reward")``. With ``KL_t`` the KL summed over the state dims:

    - ``loss_model_kl = lambda_kl * mean_t(max(KL_t, free_nats))``
      (``delayed_clamp``: ``max(mean_t(KL_t), free_nats)``);
    - ``loss_model_reco = lambda_reco * mean_{B,T}(sum_E d(reco_pixels, pixels))``;
    - ``loss_model_reward = lambda_reward * mean_{B,T}(d(reward, true_reward))``;

    where ``d`` is ``reco_loss``/``reward_loss`` and ``global_average`` averages over the event
    dims instead of summing (KL included). No loss mask is applied (``loss_mask_key=None``):
    the RSSM needs whole sequences.

    Args:
        world_model: the world model (a TensorDict module).
        lambda_kl: weight of the KL term. Defaults to 1.0.
        lambda_reco: weight of the reconstruction term. Defaults to 1.0.
        lambda_reward: weight of the reward term. Defaults to 1.0.
        reco_loss: ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        reward_loss: ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        free_nats: KL below this value gives no gradient. Defaults to 3.
        delayed_clamp: clamp the averaged KL instead of each step's. Defaults to False.
        global_average: average over every dim instead of summing the event dims.

    ``forward`` returns ``(losses, tensordict)``: the loss terms and the model's outputs, in a
    shallow copy of the input. The full wiring is the example of this module.

    Examples:
        >>> wm, td = _doctest_world_model()
        >>> losses, out = DreamerModelLoss(wm)(td)
        >>> sorted(losses.keys()), out["next", "state"].shape
        (['loss_model_kl', 'loss_model_reco', 'loss_model_reward'], torch.Size([2, 5, 4]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read (under ``"next"``) and written by the loss; rename with ``set_keys``.

        Attributes:
            reward: the predicted reward (the data's reward before the call). Defaults to ``"reward"``.
            true_reward: where the data's reward is moved. Defaults to ``"true_reward"``.
            prior_mean: prior means. Defaults to ``"prior_mean"``.
            prior_std: prior standard deviations. Defaults to ``"prior_std"``.
            posterior_mean: posterior means. Defaults to ``"posterior_mean"``.
            posterior_std: posterior standard deviations. Defaults to ``"posterior_std"``.
            pixels: the observation to reconstruct. Defaults to ``"pixels"``.
            reco_pixels: the reconstruction. Defaults to ``"reco_pixels"``.
        """

        reward: NestedKey = REWARD
        true_reward: NestedKey = "true_reward"
        prior_mean: NestedKey = "prior_mean"
        prior_std: NestedKey = "prior_std"
        posterior_mean: NestedKey = "posterior_mean"
        posterior_std: NestedKey = "posterior_std"
        pixels: NestedKey = PIXELS
        reco_pixels: NestedKey = "reco_pixels"

    default_keys = _AcceptedKeys
    out_keys = ["loss_model_kl", "loss_model_reco", "loss_model_reward"]

    def __init__(
        self,
        world_model: TensorDictModuleBase,
        *,
        lambda_kl: float = 1.0,
        lambda_reco: float = 1.0,
        lambda_reward: float = 1.0,
        reco_loss: LossFunction = "l2",
        reward_loss: LossFunction = "l2",
        free_nats: float = 3.0,
        delayed_clamp: bool = False,
        global_average: bool = False,
    ) -> None:
        super().__init__()
        if not hasattr(world_model, "in_keys"):
            raise TypeError(
                "DreamerModelLoss: world_model must be a TensorDict module (with in_keys), got "
                f"{type(world_model).__name__}"
            )
        for name, fn in (("reco_loss", reco_loss), ("reward_loss", reward_loss)):
            if fn not in ("l1", "l2", "smooth_l1"):
                raise ValueError(f"{name} must be 'l1', 'l2' or 'smooth_l1', got {fn!r}")
        if free_nats < 0:
            raise ValueError(f"free_nats must be >= 0, got {free_nats}")
        self.world_model = world_model
        self.lambda_kl = lambda_kl
        self.lambda_reco = lambda_reco
        self.lambda_reward = lambda_reward
        self.reco_loss = reco_loss
        self.reward_loss = reward_loss
        self.free_nats = free_nats
        self.delayed_clamp = delayed_clamp
        self.global_average = global_average
        self.loss_mask_key = None
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        model_in = [k for k in self.world_model.in_keys if k != next_key(keys.true_reward)]
        return [*model_in, next_key(keys.reward), next_key(keys.pixels)]

    def kl_loss(self, tensordict: TensorDictBase) -> Tensor:
        """The KL term (before ``lambda_kl``) from the model's outputs in ``tensordict``.

        Args:
            tensordict: ``[*B, T]`` data holding the prior and posterior parameters under ``"next"``.

        Returns:
            A scalar.
        """
        keys = self.tensor_keys
        params = [
            model_output(self, tensordict, next_key(k), what)
            for k, what in (
                (keys.posterior_mean, "posterior mean"),
                (keys.posterior_std, "posterior std"),
                (keys.prior_mean, "prior mean"),
                (keys.prior_std, "prior std"),
            )
        ]
        kl = gaussian_kl(*params)
        batch_dims = tensordict.batch_dims
        if self.global_average:
            kl = kl.mean(tuple(range(batch_dims, kl.ndim))) if kl.ndim > batch_dims else kl
        else:
            kl = kl.sum(tuple(range(batch_dims, kl.ndim))) if kl.ndim > batch_dims else kl
        if self.delayed_clamp:
            return kl.mean().clamp_min(self.free_nats)
        return kl.clamp_min(self.free_nats).mean()

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Runs the world model on real sequences and computes its loss terms.

        Args:
            tensordict: ``[*B, T]`` data with the model's inputs, ``("next", "reward")`` and
                ``("next", "pixels")``.

        Returns:
            ``(losses, data)``: ``loss_model_kl``, ``loss_model_reco`` and ``loss_model_reward``
            (scalars), and a shallow copy of the input with the model's outputs.
        """
        self._check_inputs(tensordict)
        keys = self.tensor_keys
        data = run_world_model(self.world_model, tensordict, keys.reward, keys.true_reward)
        batch_dims = data.batch_dims
        pixels = data.get(next_key(keys.pixels))
        reco = model_output(self, data, next_key(keys.reco_pixels), "reconstruction")
        reco_term = reduce_sequence_loss(
            distance_loss(
                reco, match_prediction(self, pixels, reco, "observation"), self.reco_loss
            ),
            batch_dims,
            self.global_average,
        )
        reward = model_output(self, data, next_key(keys.reward), "predicted reward")
        true_reward = data.get(next_key(keys.true_reward))
        reward_term = reduce_sequence_loss(
            distance_loss(
                reward, match_prediction(self, true_reward, reward, "reward"), self.reward_loss
            ),
            batch_dims,
            self.global_average,
        )
        losses = TensorDict(
            {
                "loss_model_kl": self.lambda_kl * self.kl_loss(data),
                "loss_model_reco": self.lambda_reco * reco_term,
                "loss_model_reward": self.lambda_reward * reward_term,
            }
        )
        return losses, data


class DreamerActorLoss(LossModule):
    """Dreamer's actor loss: maximise the λ-returns of rollouts imagined by the world model.

    The posterior states of a real batch (``("next", "state")``, ``("next", "belief")``,
    ``[*B, T, ...]``) are flattened into ``N = prod(B) * T`` detached start states; the
    model-based env (a :class:`~torchrl.envs.DreamerEnv`) is reset to them and rolled out for
    ``imagination_horizon`` steps with the actor in random exploration mode, giving
    ``[N, H]`` imagined data. The λ-return ``G`` (the value estimator, TD(λ) by default, with
    the value model on the next states) is then differentiated through the rollout:

        ``loss_actor = -mean_N(sum_t w_t * G_t)``, ``w_t = gamma ** t`` with ``discount_loss``
        else 1.

    The env's parameters and the value model are held out (no gradients reach them; gradients
    flow through them into the actor). The imagined data, detached, with ``"lambda_target"``,
    is returned for :class:`DreamerValueLoss`.

    Args:
        actor_model: the policy (reparameterised, e.g. a ``ProbabilisticActor`` with ``TanhNormal``).
        value_model: the value model, writing ``"state_value"``.
        model_based_env: the imagination env (:class:`~torchrl.envs.DreamerEnv`).
        imagination_horizon: steps imagined from each start state. Defaults to 15.
        discount_loss: weight step ``t`` by ``gamma ** t``. Defaults to False.
        gamma: discount of the default value estimator (TD(λ)). Defaults to 0.99.
        lmbda: λ of the default value estimator. Defaults to 0.95.

    ``forward`` returns ``(losses, imagined_data)``. The full wiring is the example of this
    module.

    Examples:
        >>> actor, value, env, td = _doctest_imagination()
        >>> losses, fake = DreamerActorLoss(actor, value, env, imagination_horizon=4)(td)
        >>> losses["loss_actor"].shape, fake.batch_size, fake["lambda_target"].shape
        (torch.Size([]), torch.Size([10, 4]), torch.Size([10, 4, 1]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read and written by the loss; rename with ``set_keys``.

        Attributes:
            state: the stochastic latent (start states read under ``"next"``). Defaults to ``"state"``.
            belief: the deterministic latent (read under ``"next"``). Defaults to ``"belief"``.
            reward: the imagined reward. Defaults to ``"reward"``.
            value: the value model's output. Defaults to ``"state_value"``.
            done: the done flag of the imagined steps. Defaults to ``"done"``.
            terminated: the terminated flag of the imagined steps. Defaults to ``"terminated"``.
            lambda_target: where the λ-return is written. Defaults to ``"lambda_target"``.
        """

        state: NestedKey = "state"
        belief: NestedKey = "belief"
        reward: NestedKey = REWARD
        value: NestedKey = STATE_VALUE
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED
        lambda_target: NestedKey = LAMBDA_TARGET

    default_keys = _AcceptedKeys
    actor_model: TensorDictModuleBase
    value_model: TensorDictModuleBase
    model_based_env: EnvBase
    default_value_estimator = ValueEstimators.TDLambda
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
    out_keys = ["loss_actor"]

    def __init__(
        self,
        actor_model: TensorDictModuleBase,
        value_model: TensorDictModuleBase,
        model_based_env: EnvBase,
        *,
        imagination_horizon: int = 15,
        discount_loss: bool = False,
        gamma: float | None = None,
        lmbda: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(model_based_env, EnvBase):
            raise TypeError(
                f"{type(self).__name__}: model_based_env must be an EnvBase (e.g. DreamerEnv), got "
                f"{type(model_based_env).__name__}"
            )
        for name, module in (("actor_model", actor_model), ("value_model", value_model)):
            if not (hasattr(module, "in_keys") and hasattr(module, "out_keys")):
                raise TypeError(
                    f"{type(self).__name__}: {name} must be a TensorDict module, got "
                    f"{type(module).__name__}"
                )
        if imagination_horizon < 1:
            raise ValueError(f"imagination_horizon must be >= 1, got {imagination_horizon}")
        self.actor_model = actor_model
        self.value_model = value_model
        self.model_based_env = model_based_env
        self.imagination_horizon = imagination_horizon
        self.discount_loss = discount_loss
        self.loss_mask_key = None
        self._adopt_out_key("value", value_model)
        hyper: dict[str, Any] = {}
        if gamma is not None:
            hyper["gamma"] = gamma
        if lmbda is not None:
            hyper["lmbda"] = lmbda
        self.make_value_estimator(self.default_value_estimator, **hyper)
        self._refresh_keys()

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> LossModule:
        """Chooses how λ-returns are computed (TD(λ) by default; TD(0) and TD(1) also work).

        ``lmbda`` is dropped for the estimators that take none; the estimator is always
        differentiable (the actor's gradient goes through it).

        Args:
            value_type: a :class:`~torchrl.objectives.ValueEstimators` member.
            **hyperparams: ``gamma``, ``lmbda``, ...

        Returns:
            The loss.
        """
        value_type = ValueEstimators(value_type or self.default_value_estimator)
        if value_type is not ValueEstimators.TDLambda:
            hyperparams.pop("lmbda", None)
        hyperparams["differentiable"] = True
        return super().make_value_estimator(value_type, **hyperparams)

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [next_key(keys.state), next_key(keys.belief)]

    @property
    def gamma(self) -> float | Tensor:
        """The discount of the value estimator."""
        return self.value_estimator.gamma

    def start_states(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The detached posterior states of ``tensordict``, flattened to one batch dim.

        Args:
            tensordict: ``[*B, T]`` data with ``("next", "state")`` and ``("next", "belief")``.

        Returns:
            A ``[N]`` TensorDict with ``"state"`` and ``"belief"``.
        """
        self._check_inputs(tensordict)
        keys = self.tensor_keys
        batch = tensordict.batch_size
        flat = {}
        for key in (keys.state, keys.belief):
            value = tensordict.get(next_key(key)).detach()
            flat[key] = value.reshape(-1, *value.shape[len(batch) :])
        n = next(iter(flat.values())).shape[0]
        return TensorDict(flat, batch_size=[n], device=tensordict.device)

    def imagine(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rolls the actor out in the model-based env from the posterior states of ``tensordict``.

        Gradients flow through the rollout to the actor; the env's own parameters are held out.

        Args:
            tensordict: ``[*B, T]`` data with the posterior states under ``"next"``.

        Returns:
            The imagined data, ``[N, imagination_horizon]``.
        """
        starts = self.start_states(tensordict)
        env = self.model_based_env
        with hold_out_net(env), set_exploration_type(ExplorationType.RANDOM):
            starts = env.reset(starts)
            return env.rollout(
                self.imagination_horizon,
                self.actor_model,
                auto_reset=False,
                tensordict=starts,
            )

    def lambda_return(self, imagined: TensorDictBase) -> Tensor:
        """The λ-return of imagined data (the value model, held out, runs on the next states).

        Args:
            imagined: ``[N, H]`` data as returned by :meth:`imagine`.

        Returns:
            ``[N, H, 1]`` returns, differentiable through rewards and next states.
        """
        value_key = self.tensor_keys.value
        next_td = imagined.get(NEXT)
        with hold_out_net(self.value_model):
            next_value = self.value_model(next_td.select(*self.value_model.in_keys)).get(value_key)
        return self.value_estimator.value_estimate(imagined, next_value=next_value)

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Imagines rollouts from the batch's posterior states and computes ``loss_actor``.

        Args:
            tensordict: ``[*B, T]`` data (e.g. the second output of :class:`DreamerModelLoss`).

        Returns:
            ``(losses, imagined)``: ``loss_actor`` (scalar), and the imagined data ``[N, H]``,
            detached, with ``"lambda_target"`` (``[N, H, 1]``).
        """
        imagined = self.imagine(tensordict)
        target = self.lambda_return(imagined)
        weights = (
            discount_weights(self.gamma, target) if self.discount_loss else torch.ones_like(target)
        )
        loss = -(weights * target).sum(tuple(range(1, target.ndim))).mean()
        imagined = imagined.detach()
        imagined.set(self.tensor_keys.lambda_target, target.detach())
        return TensorDict({"loss_actor": loss}), imagined


class DreamerValueLoss(LossModule):
    """Dreamer's value loss: regress ``V(s_t)`` on the λ-returns of imagined rollouts.

    ``loss_value = 0.5 * mean_N(sum_t w_t * d(V(s_t), sg(G_t)))`` where the states are the
    detached imagined states, ``G`` the ``"lambda_target"`` written by
    :class:`DreamerActorLoss`, ``d`` is ``value_loss`` and ``w_t = gamma ** t`` with
    ``discount_loss`` (else 1).

    Args:
        value_model: the value model, writing ``"state_value"``.
        value_loss: ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        discount_loss: weight step ``t`` by ``gamma ** t``. Defaults to False.
        gamma: the discount of the weights. Defaults to 0.99.

    ``forward`` returns ``(losses, imagined_data)``, the value model's output written in the
    data. The full wiring is the example of this module.

    Examples:
        >>> actor, value, env, td = _doctest_imagination()
        >>> _, fake = DreamerActorLoss(actor, value, env, imagination_horizon=4)(td)
        >>> losses, _ = DreamerValueLoss(value)(fake)
        >>> losses["loss_value"].shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read by the loss; rename with ``set_keys``.

        Attributes:
            value: the value model's output. Defaults to ``"state_value"``.
            lambda_target: the λ-return regressed on. Defaults to ``"lambda_target"``.
        """

        value: NestedKey = STATE_VALUE
        lambda_target: NestedKey = LAMBDA_TARGET

    default_keys = _AcceptedKeys
    value_model: TensorDictModuleBase
    out_keys = ["loss_value"]

    def __init__(
        self,
        value_model: TensorDictModuleBase,
        value_loss: LossFunction = "l2",
        discount_loss: bool = False,
        gamma: float = 0.99,
    ) -> None:
        super().__init__()
        if not (hasattr(value_model, "in_keys") and hasattr(value_model, "out_keys")):
            raise TypeError(
                f"DreamerValueLoss: value_model must be a TensorDict module, got "
                f"{type(value_model).__name__}"
            )
        if value_loss not in ("l1", "l2", "smooth_l1"):
            raise ValueError(f"value_loss must be 'l1', 'l2' or 'smooth_l1', got {value_loss!r}")
        self.value_model = value_model
        self.value_loss = value_loss
        self.discount_loss = discount_loss
        self.gamma = gamma
        self.loss_mask_key = None
        self._adopt_out_key("value", value_model)
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self.value_model.in_keys, self.tensor_keys.lambda_target]

    def forward(self, fake_data: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Computes ``loss_value`` on imagined data.

        Args:
            fake_data: ``[N, H]`` imagined data with the value model's inputs and ``"lambda_target"``.

        Returns:
            ``(losses, fake_data)``: ``loss_value`` (scalar), and the input with the predicted values.
        """
        self._check_inputs(fake_data)
        keys = self.tensor_keys
        inputs = fake_data.select(*self.value_model.in_keys).detach()
        value = self.value_model(inputs).get(keys.value)
        target = fake_data.get(keys.lambda_target).detach()
        dist = distance_loss(value, target.to(value.dtype), self.value_loss)
        weights = discount_weights(self.gamma, dist) if self.discount_loss else 1.0
        loss = 0.5 * (weights * dist).sum(tuple(range(1, dist.ndim))).mean()
        fake_data.set(keys.value, value.detach())
        return TensorDict({"loss_value": loss}), fake_data


def _doctest_world_model() -> tuple[TensorDictModuleBase, TensorDictBase]:
    """A tiny state-based Dreamer world model and a ``[2, 5]`` batch (for the doctests)."""
    world_model, data, _, _ = _doctest_parts()
    return world_model, data


def _doctest_parts() -> tuple[TensorDictModuleBase, TensorDictBase, nn.Module, nn.Module]:
    """World model, batch, and the prior and reward networks it holds."""
    from tensordict.nn import TensorDictModule, TensorDictSequential

    from torchrl.modules import MLP, ObsDecoder, ObsEncoder, RSSMPosterior, RSSMPrior, RSSMRollout
    from torchrl.modules.actors import WorldModelWrapper

    torch.manual_seed(0)
    state_dim, belief_dim, action_dim, obs_dim = 4, 6, 2, 3
    encoder = TensorDictModule(
        ObsEncoder(obs_dim=obs_dim, num_layers=1, num_cells=8),
        [("next", "pixels")],
        [("next", "encoded_latents")],
    )
    prior = RSSMPrior(None, 8, belief_dim, state_dim, action_dim=action_dim)
    reward_net = MLP(in_features=state_dim + belief_dim, out_features=1, depth=1, num_cells=8)
    rssm = RSSMRollout(
        TensorDictModule(
            prior,
            ["state", "belief", "action"],
            [("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
        ),
        TensorDictModule(
            RSSMPosterior(8, state_dim, rnn_hidden_dim=belief_dim, obs_embed_dim=8),
            [("next", "belief"), ("next", "encoded_latents")],
            [("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
        ),
    )
    decoder = TensorDictModule(
        ObsDecoder(obs_dim=obs_dim, latent_dim=state_dim + belief_dim, num_layers=1, num_cells=8),
        [("next", "state"), ("next", "belief")],
        [("next", "reco_pixels")],
    )
    reward = TensorDictModule(
        reward_net,
        [("next", "state"), ("next", "belief")],
        [("next", "reward")],
    )
    world_model = WorldModelWrapper(TensorDictSequential(encoder, rssm, decoder), reward)
    b, t = 2, 5
    data = TensorDict(
        {
            "state": torch.zeros(b, t, state_dim),
            "belief": torch.zeros(b, t, belief_dim),
            "action": torch.rand(b, t, action_dim) * 2 - 1,
            ("next", "pixels"): torch.randn(b, t, obs_dim),
            ("next", "reward"): torch.randn(b, t, 1),
        },
        batch_size=[b, t],
    )
    return world_model, data, prior, reward_net


def _doctest_imagination() -> tuple[Any, Any, Any, TensorDictBase]:
    """Actor, value model, DreamerEnv and posterior states sharing the doctest world model."""
    from tensordict.nn import TensorDictModule

    from torchrl.data import Bounded
    from torchrl.envs import DreamerEnv
    from torchrl.modules import MLP, DreamerActor, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.modules.actors import WorldModelWrapper

    world_model, data, prior, reward_net = _doctest_parts()
    _, data = DreamerModelLoss(world_model)(data)
    env_model = WorldModelWrapper(
        TensorDictModule(prior, ["state", "belief", "action"], ["_", "_", "state", "belief"]),
        TensorDictModule(reward_net, ["state", "belief"], ["reward"]),
    )
    spec = Bounded(-1.0, 1.0, shape=(2,))
    env = DreamerEnv(env_model, prior_shape=(4,), belief_shape=(6,), action_spec=spec)
    actor = ProbabilisticActor(
        TensorDictModule(
            DreamerActor(2, depth=1, num_cells=8, in_features=10),
            ["state", "belief"],
            ["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        spec=spec,
    )
    value = ValueOperator(
        MLP(in_features=10, out_features=1, depth=1, num_cells=8), in_keys=["state", "belief"]
    )
    return actor, value, env, data
