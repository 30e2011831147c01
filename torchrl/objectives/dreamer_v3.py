"""DreamerV3 losses: world model (KL balancing, free bits, symlog/two-hot), actor and critic.

Reference: Hafner et al., "Mastering Diverse Domains through World Models" (2023),
https://arxiv.org/abs/2301.04104. The training loop is Dreamer's (see
:mod:`torchrl.objectives.dreamer`): the model loss runs on real sequences and returns the
posterior states, the actor loss imagines rollouts from them in a model-based env and returns
the imagined data with its ``"lambda_target"``, and the value loss fits the critic to it. What
changes from v1:

- discrete latents: the KL is split into a *dynamics* term ``KL(sg(post) || prior)`` and a
  *representation* term ``KL(post || sg(prior))``, each floored at ``free_bits``, and
  balanced by ``kl_alpha``; reconstruction targets are symlog-transformed; rewards are
  predicted as two-hot categoricals over symlog bins; an optional continue head;
- the actor's returns are divided by ``max(1, P95 - P5)`` (moving percentiles of the
  λ-returns, :class:`~torchrl.modules.PercentileValueNorm`), with an entropy bonus;
- the critic is a two-hot categorical (or symlog regression) with an optional regularizer
  towards a slow (EMA) copy of itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor
from torch.nn import functional as F

from torchrl._keys import PIXELS, REWARD, STATE_VALUE, TERMINATED
from torchrl._types import NestedKey
from torchrl.envs.common import EnvBase
from torchrl.modules.functional import symlog
from torchrl.modules.models.dreamer_v3 import SymExpTwoHot
from torchrl.modules.models.dreamer_v3_functional import categorical_kl_terms
from torchrl.modules.models.value_norm import PercentileValueNorm
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.dreamer import (
    LAMBDA_TARGET,
    DreamerActorLoss,
    discount_weights,
    match_prediction,
    model_output,
    reduce_sequence_loss,
    run_world_model,
)
from torchrl.objectives.utils import distance_loss

__all__ = ["DreamerV3ActorLoss", "DreamerV3ModelLoss", "DreamerV3ValueLoss"]


def _entropy(dist: Any, sample: Tensor) -> Tensor:
    """The distribution's entropy, or ``-log_prob`` of a fresh reparameterised sample."""
    try:
        return dist.entropy()
    except NotImplementedError:
        rsample = dist.rsample() if getattr(dist, "has_rsample", False) else sample
        return -dist.log_prob(rsample)


class DreamerV3ModelLoss(LossModule):
    """DreamerV3's world-model loss: balanced KL with free bits, symlog reconstruction, two-hot reward.

    The world model runs on real sequences ``[*B, T]`` and writes under ``"next"`` the prior and
    posterior logits (``[*B, T, num_categoricals, num_classes]``), the reconstruction, the
    reward prediction (two-hot logits at ``"reward_logits"``, or a scalar at ``"reward"``) and,
    with ``lambda_continue > 0``, continue logits. The data's reward is moved to
    ``("next", "true_reward")`` first. With ``dyn_t = max(free_bits, KL(sg(post) || prior))``
    and ``rep_t = max(free_bits, KL(post || sg(prior)))`` (summed over the categoricals):

    - ``loss_model_kl = lambda_kl * mean(kl_alpha * dyn + (1 - kl_alpha) * rep)``;
    - ``loss_model_reco = lambda_reco * mean_{B,T}(sum_E d(reco, symlog(obs)))``;
    - ``loss_model_reward = lambda_reward * mean(CE(reward_logits, two_hot(symlog(r))))``
      (``reward_two_hot=False``: ``(symlog(reward) - symlog(r))**2``);
    - ``loss_model_continue = lambda_continue * mean(BCE(continue_logits, 1 - terminated))``.

    ``kl_dyn`` and ``kl_rep`` (means) are returned as detached diagnostics.

    Args:
        world_model: the world model (a TensorDict module).
        lambda_kl: weight of the KL term. Defaults to 1.0.
        lambda_reco: weight of the reconstruction term. Defaults to 1.0.
        lambda_reward: weight of the reward term. Defaults to 1.0.
        lambda_continue: weight of the continue term; 0 disables it. Defaults to 0.0.
        kl_alpha: weight of the dynamics term in the KL (the paper's 0.5 : 0.1). Defaults to 0.8.
        free_bits: floor of each KL term, in nats. Defaults to 1.0.
        reco_loss: ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        reward_two_hot: two-hot reward logits (else a scalar symlog regression). Defaults to True.
        num_reward_bins: bins of the default two-hot reward transform. Defaults to 255.
        symlog_obs: compare the reconstruction with ``symlog(obs)``. Defaults to True.
        unimix: uniform fraction mixed into both categoricals for the KL. Defaults to 0.01.
        reward_two_hot_transform: the reward's :class:`~torchrl.modules.SymExpTwoHot` (bins).

    ``forward`` returns ``(losses, tensordict)``: the loss terms and the model's outputs, in a
    shallow copy of the input. A complete DreamerV3 update is in
    ``docs/_model_based_losses.rst.txt``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> class Model(torch.nn.Module):  # stands in for encoder + RSSMRolloutV3 + heads
        ...     def forward(self, obs):
        ...         logits = obs[..., :1, None].expand(*obs.shape[:-1], 2, 3) * torch.ones(3)
        ...         return logits, logits.flip(-1), obs * 0.5, obs.sum(-1, keepdim=True).expand(*obs.shape[:-1], 255)
        >>> wm = TensorDictModule(Model(), [("next", "pixels")], [("next", "posterior_logits"),
        ...     ("next", "prior_logits"), ("next", "reco_pixels"), ("next", "reward_logits")])
        >>> td = TensorDict({("next", "pixels"): torch.randn(2, 4, 3),
        ...     ("next", "reward"): torch.randn(2, 4, 1)}, batch_size=[2, 4])
        >>> losses, _ = DreamerV3ModelLoss(wm)(td)
        >>> sorted(losses.keys())
        ['kl_dyn', 'kl_rep', 'loss_model_kl', 'loss_model_reco', 'loss_model_reward']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read (under ``"next"``) by the loss; rename with ``set_keys``.

        Attributes:
            reward: the data's reward (moved to ``true_reward``), or the scalar prediction. Defaults to ``"reward"``.
            true_reward: where the data's reward is moved. Defaults to ``"true_reward"``.
            reward_logits: the two-hot reward logits. Defaults to ``"reward_logits"``.
            prior_logits: the prior's logits. Defaults to ``"prior_logits"``.
            posterior_logits: the posterior's logits. Defaults to ``"posterior_logits"``.
            pixels: the observation to reconstruct. Defaults to ``"pixels"``.
            reco_pixels: the reconstruction. Defaults to ``"reco_pixels"``.
            continue_logits: the continue head's logits. Defaults to ``"continue_logits"``.
            terminated: the data's terminated flag (continue target). Defaults to ``"terminated"``.
        """

        reward: NestedKey = REWARD
        true_reward: NestedKey = "true_reward"
        reward_logits: NestedKey = "reward_logits"
        prior_logits: NestedKey = "prior_logits"
        posterior_logits: NestedKey = "posterior_logits"
        pixels: NestedKey = PIXELS
        reco_pixels: NestedKey = "reco_pixels"
        continue_logits: NestedKey = "continue_logits"
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    out_keys = ["loss_model_kl", "loss_model_reco", "loss_model_reward"]

    def __init__(
        self,
        world_model: TensorDictModuleBase,
        *,
        lambda_kl: float = 1.0,
        lambda_reco: float = 1.0,
        lambda_reward: float = 1.0,
        lambda_continue: float = 0.0,
        kl_alpha: float = 0.8,
        free_bits: float = 1.0,
        reco_loss: Literal["l1", "l2", "smooth_l1"] = "l2",
        reward_two_hot: bool = True,
        num_reward_bins: int = 255,
        symlog_obs: bool = True,
        unimix: float = 0.01,
        reward_two_hot_transform: SymExpTwoHot | None = None,
    ) -> None:
        super().__init__()
        if not hasattr(world_model, "in_keys"):
            raise TypeError(
                "DreamerV3ModelLoss: world_model must be a TensorDict module (with in_keys), got "
                f"{type(world_model).__name__}"
            )
        if not 0.0 <= kl_alpha <= 1.0:
            raise ValueError(f"kl_alpha must lie in [0, 1], got {kl_alpha}")
        if free_bits < 0:
            raise ValueError(f"free_bits must be >= 0, got {free_bits}")
        if reco_loss not in ("l1", "l2", "smooth_l1"):
            raise ValueError(f"reco_loss must be 'l1', 'l2' or 'smooth_l1', got {reco_loss!r}")
        self.world_model = world_model
        self.lambda_kl = lambda_kl
        self.lambda_reco = lambda_reco
        self.lambda_reward = lambda_reward
        self.lambda_continue = lambda_continue
        self.kl_alpha = kl_alpha
        self.free_bits = free_bits
        self.reco_loss = reco_loss
        self.reward_two_hot = reward_two_hot
        self.symlog_obs = symlog_obs
        self.unimix = unimix
        self.reward_transform = (
            reward_two_hot_transform
            if reward_two_hot_transform is not None
            else SymExpTwoHot(num_reward_bins)
        )
        self.loss_mask_key = None
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        model_in = [k for k in self.world_model.in_keys if k != next_key(keys.true_reward)]
        extra = [next_key(keys.terminated)] if self.lambda_continue > 0 else []
        return [*model_in, next_key(keys.reward), next_key(keys.pixels), *extra]

    def _output(self, td: TensorDictBase, key: NestedKey, what: str) -> Tensor:
        return model_output(self, td, next_key(key), what)

    def kl_terms(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor]:
        """The dynamics and representation KL terms ``[*B, T]`` (floored at ``free_bits``).

        Args:
            tensordict: data holding the posterior and prior logits under ``"next"``.

        Returns:
            ``(dyn, rep)``.
        """
        keys = self.tensor_keys
        post = self._output(tensordict, keys.posterior_logits, "posterior logits")
        prior = self._output(tensordict, keys.prior_logits, "prior logits")
        return categorical_kl_terms(
            post, prior, free_nats=self.free_bits, unimix=self.unimix, reduction="none"
        )

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Runs the world model on real sequences and computes its loss terms.

        Args:
            tensordict: ``[*B, T]`` data with the model's inputs, ``("next", "reward")`` and
                ``("next", "pixels")`` (and ``("next", "terminated")`` with a continue term).

        Returns:
            ``(losses, data)``: the ``loss_model_*`` scalars and ``kl_dyn``/``kl_rep``, and a
            shallow copy of the input with the model's outputs.
        """
        self._check_inputs(tensordict)
        keys = self.tensor_keys
        data = run_world_model(self.world_model, tensordict, keys.reward, keys.true_reward)
        batch_dims = data.batch_dims

        dyn, rep = self.kl_terms(data)
        kl = (self.kl_alpha * dyn + (1.0 - self.kl_alpha) * rep).mean()

        obs = data.get(next_key(keys.pixels))
        reco = self._output(data, keys.reco_pixels, "reconstruction")
        if obs.shape != reco.shape:
            raise ValueError(
                f"DreamerV3ModelLoss: the reconstruction has shape {tuple(reco.shape)}, the "
                f"observation {tuple(obs.shape)}"
            )
        target = obs.to(reco.dtype)
        if self.symlog_obs:
            target = symlog(target)
        reco_term = reduce_sequence_loss(distance_loss(reco, target, self.reco_loss), batch_dims)

        true_reward = data.get(next_key(keys.true_reward))
        if self.reward_two_hot:
            logits = self._output(data, keys.reward_logits, "reward logits")
            reward_term = self.reward_transform.loss(logits, true_reward.to(logits.dtype)).mean()
        else:
            pred = self._output(data, keys.reward, "predicted reward")
            true_reward = match_prediction(self, true_reward, pred, "reward")
            reward_term = (symlog(pred) - symlog(true_reward)).pow(2).mean()

        losses = TensorDict(
            {
                "loss_model_kl": self.lambda_kl * kl,
                "loss_model_reco": self.lambda_reco * reco_term,
                "loss_model_reward": self.lambda_reward * reward_term,
                "kl_dyn": dyn.mean().detach(),
                "kl_rep": rep.mean().detach(),
            }
        )
        if self.lambda_continue > 0:
            cont = self._output(data, keys.continue_logits, "continue logits")
            terminated = data.get(next_key(keys.terminated)).reshape(cont.shape)
            cont_target = 1.0 - terminated.to(cont.dtype)
            cont_term = F.binary_cross_entropy_with_logits(cont, cont_target)
            losses.set("loss_model_continue", self.lambda_continue * cont_term)
        return losses, data


class DreamerV3ActorLoss(DreamerActorLoss):
    """DreamerV3's actor loss: percentile-normalised returns and an entropy bonus, in imagination.

    Imagination is Dreamer's (:class:`~torchrl.objectives.DreamerActorLoss`): ``[N, H]``
    rollouts in the model-based env from the batch's detached posterior states, λ-returns
    ``G_t`` with the (held-out) critic on the next states. The returns' scale
    ``S = max(1, P95 - P5)`` comes from moving averages of the batch percentiles
    (:class:`~torchrl.modules.PercentileValueNorm` at ``self.retnorm``, updated every call in
    training mode, before use). With ``w_t = gamma ** t`` (``discount_loss``) and ``eta`` the
    entropy bonus, averaged over ``N`` and ``t``:

    - reparameterised (default): ``loss_actor = -mean(w_t * (G_t / S + eta * H_t))``, the
      gradient going through the world model;
    - ``use_reinforce``: ``loss_actor = -mean(w_t * (log pi(a_t) * sg((G_t - v_t) / S) + eta * H_t))``
      on detached states and actions (discrete actions).

    ``H_t`` is the policy's entropy at the imagined state (``-log_prob`` of a sample where no
    closed form exists). ``return_scale`` and ``entropy`` are returned as diagnostics.

    Args:
        actor_model: the policy (a probabilistic actor with ``get_dist``).
        value_model: the critic, writing ``"state_value"`` (a decoded scalar).
        model_based_env: the imagination env (:class:`~torchrl.envs.DreamerEnv`).
        imagination_horizon: steps imagined from each start state. Defaults to 15.
        discount_loss: weight step ``t`` by ``gamma ** t``. Defaults to True.
        entropy_bonus: the entropy weight ``eta``. Defaults to 3e-4.
        use_reinforce: score-function gradients instead of reparameterisation. Defaults to False.
        return_normalization: divide by ``S`` (else 1). Defaults to True.
        percentile_rate: step of the percentile moving averages. Defaults to 0.01.
        gamma: discount of the value estimator. Defaults to 0.99 (the paper uses 0.997).
        lmbda: λ of the value estimator. Defaults to 0.95.

    The wiring is that of :class:`~torchrl.objectives.DreamerActorLoss`; the returned data
    feeds :class:`DreamerV3ValueLoss`. A complete DreamerV3 update (world model, imagination env,
    actor, two-hot critic, slow critic) is in ``docs/_model_based_losses.rst.txt``.

    Examples:
        >>> from torchrl.objectives.dreamer import _doctest_imagination
        >>> # a tiny actor, critic, imagination env and batch of posterior states
        >>> actor, value, env, td = _doctest_imagination()
        >>> loss = DreamerV3ActorLoss(actor, value, env, imagination_horizon=4)
        >>> losses, fake = loss(td)
        >>> sorted(losses.keys()), fake.batch_size  # fake: [N, H] imagined steps
        (['entropy', 'loss_actor', 'return_scale'], torch.Size([10, 4]))
        >>> losses["loss_actor"].backward()
    """

    out_keys = ["loss_actor"]

    def __init__(
        self,
        actor_model: TensorDictModuleBase,
        value_model: TensorDictModuleBase,
        model_based_env: EnvBase,
        *,
        imagination_horizon: int = 15,
        discount_loss: bool = True,
        entropy_bonus: float = 3e-4,
        use_reinforce: bool = False,
        return_normalization: bool = True,
        percentile_rate: float = 0.01,
        gamma: float | None = 0.99,
        lmbda: float | None = 0.95,
    ) -> None:
        super().__init__(
            actor_model,
            value_model,
            model_based_env,
            imagination_horizon=imagination_horizon,
            discount_loss=discount_loss,
            gamma=gamma,
            lmbda=lmbda,
        )
        if not hasattr(actor_model, "get_dist"):
            raise TypeError(
                "DreamerV3ActorLoss: actor_model must be a probabilistic actor (with get_dist), "
                f"got {type(actor_model).__name__}"
            )
        if entropy_bonus < 0:
            raise ValueError(f"entropy_bonus must be >= 0, got {entropy_bonus}")
        self.entropy_bonus = entropy_bonus
        self.use_reinforce = use_reinforce
        self.return_normalization = return_normalization
        self.retnorm = PercentileValueNorm(rate=percentile_rate, min_scale=1.0)

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Imagines rollouts from the batch's posterior states and computes ``loss_actor``.

        Args:
            tensordict: ``[*B, T]`` data (e.g. the second output of :class:`DreamerV3ModelLoss`).

        Returns:
            ``(losses, imagined)``: ``loss_actor`` with ``return_scale`` and ``entropy``, and
            the imagined data ``[N, H]``, detached, with ``"lambda_target"`` (``[N, H, 1]``).
        """
        imagined = self.imagine(tensordict)
        target = self.lambda_return(imagined)
        if self.return_normalization:
            if self.training:
                self.retnorm.update(target.detach())
            scale = self.retnorm.scale().to(target)
        else:
            scale = torch.ones(1, dtype=target.dtype, device=target.device)
        actor: Any = self.actor_model  # a probabilistic actor (get_dist checked at init)
        action_key = self.model_based_env.action_key
        action = imagined.get(action_key)
        if self.use_reinforce:
            states = imagined.select(*actor.in_keys).detach()
            with torch.no_grad():
                baseline = self.value_model(
                    imagined.select(*self.value_model.in_keys).detach()
                ).get(self.tensor_keys.value)
            dist = actor.get_dist(states)
            advantage = ((target - baseline) / scale).detach()
            objective = dist.log_prob(action.detach()).reshape(advantage.shape) * advantage
        else:
            dist = actor.get_dist(imagined.select(*actor.in_keys))
            objective = target / scale
        entropy = _entropy(dist, action).reshape(objective.shape)
        weights = (
            discount_weights(self.gamma, objective)
            if self.discount_loss
            else torch.ones_like(objective)
        )
        loss = -(weights * (objective + self.entropy_bonus * entropy)).mean()
        imagined = imagined.detach()
        imagined.set(self.tensor_keys.lambda_target, target.detach())
        losses = TensorDict(
            {
                "loss_actor": loss,
                "return_scale": scale.detach().reshape(()),
                "entropy": entropy.detach().mean(),
            }
        )
        return losses, imagined


class DreamerV3ValueLoss(LossModule):
    """DreamerV3's critic loss on imagined data: two-hot cross-entropy or symlog regression.

    With ``G`` the ``"lambda_target"`` of :class:`DreamerV3ActorLoss` (detached), the critic
    run on the detached imagined states, and ``w_t = gamma ** t`` (``discount_loss``):

    - ``"symlog_mse"``: ``loss_value = mean(w_t * (symlog(v_t) - symlog(G_t))**2)``;
    - ``"two_hot"``: ``loss_value = mean(w_t * CE(logits_t, two_hot(symlog(G_t))))`` over the
      critic's ``"state_value_logits"`` (``num_value_bins`` bins).

    With ``slow_critic_regularization = c > 0`` a slow copy of the critic (target parameters,
    ``target_value_network_params``; step a :class:`~torchrl.objectives.SoftUpdate` after each
    critic update) is kept and ``loss_value_slow = c * mean(w_t * l(critic, slow critic's
    value))`` pulls the critic towards it, ``l`` being the same loss.

    Args:
        value_model: the critic: writes ``"state_value"`` (and ``"state_value_logits"`` for two-hot).
        value_loss: ``"symlog_mse"`` or ``"two_hot"``. Defaults to ``"symlog_mse"``.
        discount_loss: weight step ``t`` by ``gamma ** t``. Defaults to True.
        gamma: the discount of the weights (ignored with ``actor_loss``). Defaults to 0.99.
        num_value_bins: bins of the default two-hot transform. Defaults to 255.
        actor_loss: read ``gamma`` from this actor loss at every call (keeps them equal).
        slow_critic_regularization: weight ``c`` of the slow-critic term. Defaults to 0.
        value_two_hot_transform: the critic's :class:`~torchrl.modules.SymExpTwoHot` (bins).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules import SymExpTwoHot
        >>> two_hot = SymExpTwoHot(num_bins=15)
        >>> class Critic(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3, 15)
        ...     def forward(self, x):
        ...         logits = self.net(x)
        ...         return logits, two_hot(logits)
        >>> critic = TensorDictModule(Critic(), ["state"], ["state_value_logits", "state_value"])
        >>> loss = DreamerV3ValueLoss(critic, value_loss="two_hot", value_two_hot_transform=two_hot,
        ...     slow_critic_regularization=1.0)
        >>> fake = TensorDict(state=torch.randn(4, 5, 3), lambda_target=torch.randn(4, 5, 1),
        ...     batch_size=[4, 5])
        >>> losses, _ = loss(fake)
        >>> sorted(losses.keys()), loss.target_network_names
        (['loss_value', 'loss_value_slow'], ['value_network'])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read by the loss; rename with ``set_keys``.

        Attributes:
            value: the critic's decoded value. Defaults to ``"state_value"``.
            value_logits: the critic's two-hot logits. Defaults to ``"state_value_logits"``.
            lambda_target: the λ-return regressed on. Defaults to ``"lambda_target"``.
        """

        value: NestedKey = STATE_VALUE
        value_logits: NestedKey = "state_value_logits"
        lambda_target: NestedKey = LAMBDA_TARGET

    default_keys = _AcceptedKeys
    value_network: TensorDictModuleBase
    out_keys = ["loss_value"]

    def __init__(
        self,
        value_model: TensorDictModuleBase,
        value_loss: Literal["symlog_mse", "two_hot"] = "symlog_mse",
        discount_loss: bool = True,
        gamma: float = 0.99,
        num_value_bins: int = 255,
        actor_loss: DreamerActorLoss | None = None,
        *,
        slow_critic_regularization: float = 0.0,
        value_two_hot_transform: SymExpTwoHot | None = None,
    ) -> None:
        super().__init__()
        if not (hasattr(value_model, "in_keys") and hasattr(value_model, "out_keys")):
            raise TypeError(
                "DreamerV3ValueLoss: value_model must be a TensorDict module, got "
                f"{type(value_model).__name__}"
            )
        if value_loss not in ("symlog_mse", "two_hot"):
            raise ValueError(f"value_loss must be 'symlog_mse' or 'two_hot', got {value_loss!r}")
        if slow_critic_regularization < 0:
            raise ValueError(
                f"slow_critic_regularization must be >= 0, got {slow_critic_regularization}"
            )
        if actor_loss is not None and not isinstance(actor_loss, DreamerActorLoss):
            raise TypeError(
                f"actor_loss must be a DreamerActorLoss, got {type(actor_loss).__name__}"
            )
        self.value_loss = value_loss
        self.discount_loss = discount_loss
        self._gamma = gamma
        # Not a sub-module: the actor loss is trained and saved on its own.
        self._actor_loss = [actor_loss] if actor_loss is not None else []
        self.slow_critic_regularization = slow_critic_regularization
        self.value_transform = (
            value_two_hot_transform
            if value_two_hot_transform is not None
            else SymExpTwoHot(num_value_bins)
        )
        self.loss_mask_key = None
        self.convert_to_functional(
            value_model, "value_network", create_target_params=slow_critic_regularization > 0
        )
        self._adopt_out_key("value", value_model)
        self._refresh_keys()

    @property
    def gamma(self) -> float | Tensor:
        """The discount: the actor loss's when one was given, else ``gamma``."""
        if self._actor_loss:
            return self._actor_loss[0].gamma
        return self._gamma

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self.value_network.in_keys, self.tensor_keys.lambda_target]

    def _per_step(self, out: TensorDictBase, target: Tensor) -> Tensor:
        keys = self.tensor_keys
        if self.value_loss == "two_hot":
            logits = out.get(keys.value_logits, None)
            if logits is None:
                raise KeyError(
                    f"DreamerV3ValueLoss: value_loss='two_hot' needs the critic's logits at "
                    f"{keys.value_logits!r}; the critic wrote {list(self.value_network.out_keys)}"
                )
            return self.value_transform.loss(logits, target.to(logits.dtype))
        value = out.get(keys.value).reshape(target.shape)
        return (symlog(value) - symlog(target.to(value.dtype))).pow(2)

    def forward(self, fake_data: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Computes ``loss_value`` (and ``loss_value_slow``) on imagined data.

        Args:
            fake_data: ``[N, H]`` imagined data with the critic's inputs and ``"lambda_target"``.

        Returns:
            ``(losses, fake_data)``, the input with the critic's values written.
        """
        self._check_inputs(fake_data)
        keys = self.tensor_keys
        inputs = fake_data.select(*self.value_network.in_keys).detach()
        out = self._call_network("value_network", inputs.copy())
        target = fake_data.get(keys.lambda_target).detach()
        per_step = self._per_step(out, target.reshape(*fake_data.batch_size, -1).squeeze(-1))
        weights = (
            discount_weights(self.gamma, per_step, time_dim=-1)
            if self.discount_loss
            else torch.ones_like(per_step)
        )
        losses = TensorDict({"loss_value": (weights * per_step).mean()})
        if self.slow_critic_regularization > 0:
            with torch.no_grad():
                slow = self._call_network("value_network", inputs.copy(), ParamSet.TARGET)
            slow_value = slow.get(keys.value).reshape(per_step.shape)
            reg = self._per_step(out, slow_value)
            losses.set("loss_value_slow", self.slow_critic_regularization * (weights * reg).mean())
        fake_data.set(keys.value, out.get(keys.value).detach())
        return losses, fake_data
