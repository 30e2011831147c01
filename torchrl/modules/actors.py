"""Actors and value operators: tensordict modules with RL defaults for keys and specs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
    interaction_type,
    set_interaction_type,
    skip_existing,
)
from tensordict.nn.distributions import Delta
from torch import nn

from torchrl._keys import (
    ACTION,
    OBSERVATION,
    STATE_ACTION_VALUE,
    STATE_VALUE,
)
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import as_composite, leaf_spec, module_keys, project_keys

if TYPE_CHECKING:
    from torchrl.data.specs.base import TensorSpec


def _as_list(
    keys: NestedKey | Sequence[NestedKey] | None, default: list[NestedKey]
) -> list[NestedKey]:
    if keys is None:
        return list(default)
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


class Actor(TensorDictModule):
    """A deterministic policy: a module that reads ``"observation"`` and writes ``"action"``.

    Args:
        module: the network.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).
        spec: spec of the output, a leaf spec (for the first out key) or a ``Composite``.
        safe: project the outputs into ``spec`` after each call.
        **kwargs: other :class:`~tensordict.nn.TensorDictModule` arguments.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded
        >>> actor = Actor(nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> td = actor(TensorDict(observation=torch.randn(5, 3) * 100, batch_size=[5]))
        >>> bool(td["action"].abs().max() <= 1)
        True
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        in_keys = _as_list(in_keys, [OBSERVATION])
        out_keys = _as_list(out_keys, [ACTION])
        super().__init__(
            module, in_keys=module_keys(in_keys), out_keys=module_keys(out_keys), **kwargs
        )
        if safe and spec is None:
            raise ValueError("safe=True needs a spec to project the outputs into")
        self.spec = as_composite(spec, out_keys)
        self.safe = safe

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        out = super().forward(tensordict, *args, **kwargs)
        if self.safe:
            project_keys(out, self.spec, self.out_keys)
        return out


class ProbabilisticActor(ProbabilisticTensorDictSequential):
    """A stochastic policy: a parameter network followed by a distribution.

    ``module`` writes the distribution parameters (e.g. ``"loc"``, ``"scale"``); ``in_keys``
    names them for ``distribution_class``; the value drawn (per the exploration type) is written
    at ``out_keys``. With ``return_log_prob=True`` its log-probability is written at
    ``log_prob_key`` (default: the sample key with ``_log_prob`` appended, ``"action_log_prob"``
    for ``"action"``, as in current TorchRL; pass ``"sample_log_prob"`` for the paper-era name,
    which the losses also read). With ``safe=True`` the sample is projected
    into ``spec`` after sampling (the log-probability is that of the unprojected sample).

    Args:
        module: a tensordict module that writes the distribution parameters.
        in_keys: parameter keys (a list, or a dict ``{distribution kwarg: key}``).
        out_keys: sample keys (default ``["action"]``).
        spec: spec of the sample (leaf or ``Composite``).
        safe: project samples into ``spec``.
        default_interaction_type: used when no exploration type is set (``DETERMINISTIC``).
        distribution_class: the distribution (default ``Delta``).
        distribution_kwargs: extra constructor kwargs (e.g. ``{"low": -2, "high": 2}``).
        return_log_prob: also write the log-probability.
        log_prob_key: where to write it (``None``: ``<sample key>_log_prob``).
        cache_dist: cache the last distribution (see tensordict).
        n_empirical_estimate: samples averaged for ``MEAN`` when there is no closed form.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, set_interaction_type
        >>> from torchrl.modules import MLP, NormalParamExtractor, TanhNormal
        >>> net = TensorDictModule(nn.Sequential(MLP(3, 4, depth=1), NormalParamExtractor()),
        ...                        in_keys=["observation"], out_keys=["loc", "scale"])
        >>> actor = ProbabilisticActor(net, in_keys=["loc", "scale"],
        ...                            distribution_class=TanhNormal, return_log_prob=True)
        >>> with set_interaction_type("random"):
        ...     td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        safe: bool = False,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
        distribution_class: type = Delta,
        distribution_kwargs: dict | None = None,
        return_log_prob: bool = False,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
    ) -> None:
        if not isinstance(module, TensorDictModuleBase):
            raise TypeError(
                "ProbabilisticActor needs a tensordict module that writes the distribution "
                f"parameters (e.g. TensorDictModule(net, in_keys, out_keys)), got {type(module)}"
            )
        out_keys = _as_list(out_keys, [ACTION])
        if isinstance(in_keys, (str, tuple)):
            in_keys = [in_keys]
        sampler = ProbabilisticTensorDictModule(
            in_keys=cast(Any, in_keys),
            out_keys=module_keys(out_keys),
            default_interaction_type=default_interaction_type,
            distribution_class=distribution_class,
            distribution_kwargs=distribution_kwargs,
            return_log_prob=return_log_prob,
            log_prob_key=log_prob_key,
            cache_dist=cache_dist,
            n_empirical_estimate=n_empirical_estimate,
        )
        super().__init__(module, sampler)
        if safe and spec is None:
            raise ValueError("safe=True needs a spec to project the samples into")
        self.spec = as_composite(spec, out_keys)
        self.safe = safe
        self._sample_keys = out_keys
        self._set_fast_path()

    def _set_fast_path(self) -> None:
        # The generic sequence re-checks its layout, dispatch and output selection on every
        # call: several times the cost of a small policy network. When the layout is the
        # plain ``parameter modules -> one sampler`` one, ``forward`` runs the same steps
        # directly. Kept out of the module registry (``__dict__``): these are the children.
        *params, sampler = list(self.module)
        dist_class = sampler.distribution_class
        plain = (
            isinstance(sampler, ProbabilisticTensorDictModule)
            and not any(
                isinstance(m, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential))
                for m in params
            )
            and isinstance(dist_class, type)
            and not issubclass(dist_class, CompositeDistribution)
            and len(sampler.dist_sample_keys) == 1
            and sampler.num_samples is None
            and not sampler.cache_dist
            and getattr(sampler, "_generator", None) is None
            and getattr(sampler, "_generator_key", None) is None
            and self._requires_sample
            and not self.return_composite
            and not self._select_before_return
            and self.inplace in (None, True)
        )
        self.__dict__["_fast"] = (tuple(params), sampler) if plain else None

    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        fast = self.__dict__.get("_fast")
        if fast is not None and tensordict_out is None and not kwargs and not skip_existing():
            out = self._fast_forward(tensordict, *fast)
        else:
            out = super().forward(tensordict, tensordict_out, **kwargs)
        if self.safe:
            project_keys(out, self.spec, self._sample_keys)
        return out

    def get_dist(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> torch.distributions.Distribution:
        """Runs the parameter modules on ``tensordict`` and returns the distribution.

        Args:
            tensordict: the input; the parameter modules write their outputs into it (or into
                ``tensordict_out``).
            tensordict_out: where to write the parameters instead.
            **kwargs: passed to the parameter modules.

        Returns:
            The distribution built from the parameters.
        """
        fast = self.__dict__.get("_fast")
        if fast is None or tensordict_out is not None or kwargs:
            return super().get_dist(tensordict, tensordict_out, **kwargs)
        params, sampler = fast
        return sampler.get_dist(self._run_params(tensordict, params, sampler))

    @staticmethod
    def _run_params(
        tensordict: TensorDictBase,
        params: tuple[TensorDictModuleBase, ...],
        sampler: ProbabilisticTensorDictModule,
    ) -> TensorDictBase:
        # The parameter modules run under the sampler's default interaction type when none
        # is set, as in tensordict's ``get_dist_params``.
        if interaction_type() is None:
            with set_interaction_type(sampler.default_interaction_type):
                for module in params:
                    tensordict = module(tensordict)
            return tensordict
        for module in params:
            tensordict = module(tensordict)
        return tensordict

    @classmethod
    def _fast_forward(
        cls,
        tensordict: TensorDictBase,
        params: tuple[TensorDictModuleBase, ...],
        sampler: ProbabilisticTensorDictModule,
    ) -> TensorDictBase:
        """Parameter modules, distribution, one draw per the interaction type, log-prob."""
        tensordict = cls._run_params(tensordict, params, sampler)
        dist = sampler.get_dist(tensordict)
        mode = interaction_type() or sampler.default_interaction_type
        log_prob = None
        if mode is InteractionType.RANDOM:
            # A distribution that draws and scores in one go is scored on its own draw (e.g.
            # the pre-tanh value of a TanhNormal), as tensordict's sampler does.
            name = "rsample_and_log_prob" if dist.has_rsample else "sample_and_log_prob"
            if sampler.return_log_prob and callable(getattr(type(dist), name, None)):
                sample, log_prob = getattr(dist, name)(torch.Size())
            else:
                sample = dist.rsample() if dist.has_rsample else dist.sample()
        else:
            sample = sampler._dist_sample(dist, interaction_type=mode)
        tensordict.set(sampler.dist_sample_keys[0], sample)
        if sampler.return_log_prob:
            if log_prob is None:
                log_prob = dist.log_prob(sample)
            tensordict.set(sampler.log_prob_key, log_prob)
        return tensordict

    def with_trunk(self, trunk: TensorDictModuleBase) -> ProbabilisticActor:
        """Returns ``trunk -> self`` as one actor (same spec and safety, shared parameters).

        The modules are laid out flat (``trunk, *self.module``): tensordict's ``get_dist`` does
        not run the parameter network of a nested probabilistic sequence.
        """
        out = type(self).__new__(type(self))
        ProbabilisticTensorDictSequential.__init__(out, trunk, *self.module)
        out.spec = self.spec
        out.safe = self.safe
        out._sample_keys = self._sample_keys
        out._set_fast_path()
        return out


class ValueOperator(TensorDictModule):
    """A value network: reads ``"observation"`` (and maybe ``"action"``) and writes a value.

    The default output is ``"state_action_value"`` when ``"action"`` is an input and
    ``"state_value"`` otherwise.

    Args:
        module: the network (several inputs are passed positionally, in order).
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default as above).

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import MLP
        >>> q = ValueOperator(MLP(out_features=1, depth=1), in_keys=["observation", "action"])
        >>> td = TensorDict(observation=torch.randn(4, 3), action=torch.randn(4, 1), batch_size=[4])
        >>> q(td)["state_action_value"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        in_keys = _as_list(in_keys, [OBSERVATION])
        default_out = STATE_ACTION_VALUE if ACTION in in_keys else STATE_VALUE
        out_keys = _as_list(out_keys, [default_out])
        super().__init__(module, in_keys=module_keys(in_keys), out_keys=module_keys(out_keys))


class TanhModule(TensorDictModuleBase):
    """Squashes entries into ``[low, high]`` with ``low + (high - low) * (tanh(x) + 1) / 2``.

    Args:
        in_keys: keys to squash.
        out_keys: where to write (default: ``in_keys``).
        spec: a ``Bounded`` spec (or a ``Composite`` of them, keyed by ``out_keys``) giving the
            bounds; ``low``/``high`` override it.
        low: lower bound(s) (default -1).
        high: upper bound(s) (default 1).
        clamp: keep outputs one float-epsilon inside the bounds (finite ``atanh`` afterwards).

    Examples:
        >>> from tensordict import TensorDict
        >>> mod = TanhModule(["action"], low=0.0, high=2.0)
        >>> mod(TensorDict(action=torch.tensor([-100.0, 0.0, 100.0])))["action"]
        tensor([0., 1., 2.])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
        clamp: bool = False,
    ) -> None:
        super().__init__()
        self.in_keys = module_keys(_as_list(in_keys, []))
        self.out_keys = module_keys(_as_list(out_keys, self.in_keys))
        if len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"in_keys {self.in_keys} and out_keys {self.out_keys} differ in length"
            )
        self.clamp = clamp
        self._bounds: list[tuple[torch.Tensor, torch.Tensor]] = []
        for i, key in enumerate(self.out_keys):
            key_low, key_high = low, high
            leaf = leaf_spec(spec, key) if spec is not None else None
            if leaf is not None:
                key_low = leaf.low if key_low is None else key_low
                key_high = leaf.high if key_high is None else key_high
            key_low = torch.as_tensor(-1.0 if key_low is None else key_low, dtype=torch.float32)
            key_high = torch.as_tensor(1.0 if key_high is None else key_high, dtype=torch.float32)
            if not bool((key_high > key_low).all()):
                raise ValueError(
                    f"high must exceed low for {key!r}: low={key_low}, high={key_high}"
                )
            self.register_buffer(f"_low_{i}", key_low)
            self.register_buffer(f"_high_{i}", key_high)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            low, high = getattr(self, f"_low_{i}"), getattr(self, f"_high_{i}")
            unit = torch.tanh(tensordict.get(in_key))
            if self.clamp:
                eps = torch.finfo(unit.dtype).eps
                unit = unit.clamp(-1 + eps, 1 - eps)
            # the affine map can round one float step past a bound: envs check actions
            # against their bounds, so the result is kept inside them
            out = torch.clamp(low + (high - low) * (unit + 1) / 2, low, high)
            tensordict.set(out_key, out)
        return tensordict


def _is_probabilistic(module: nn.Module) -> bool:
    return isinstance(module, (ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential))


def _chain(trunk: TensorDictModuleBase, head: TensorDictModuleBase) -> TensorDictSequential:
    if isinstance(head, ProbabilisticActor):
        return head.with_trunk(trunk)
    if isinstance(head, ProbabilisticTensorDictSequential):
        # Flat layout: tensordict's get_dist skips the parameter net of a nested sequence.
        return ProbabilisticTensorDictSequential(trunk, *head.module)
    if _is_probabilistic(head):
        return ProbabilisticTensorDictSequential(trunk, head)
    return TensorDictSequential(trunk, head)


class ActorValueOperator(TensorDictSequential):
    """An actor and a state-value head sharing a common trunk: ``common -> (policy, value)``.

    Calling it runs all three. :meth:`get_policy_operator` and :meth:`get_value_operator`
    return stand-alone ``common -> policy`` and ``common -> value`` modules that share the
    parameters.

    Args:
        common_operator: reads observations, writes a hidden representation.
        policy_operator: reads the hidden representation, writes the action.
        value_operator: reads the hidden representation, writes ``"state_value"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> common = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        >>> policy = Actor(nn.Linear(8, 2), in_keys=["hidden"])
        >>> value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        >>> op = ActorValueOperator(common, policy, value)
        >>> td = op(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))
        >>> sorted(td.keys())
        ['action', 'hidden', 'observation', 'state_value']
        >>> "state_value" in op.get_policy_operator().out_keys
        False
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ) -> None:
        super().__init__(common_operator, policy_operator, value_operator)

    def get_head(self, index: int) -> TensorDictModuleBase:
        """The ``index``-th part: 0 the common trunk, 1 the policy head, 2 the value head."""
        return cast(TensorDictModuleBase, self.module[index])

    def get_policy_operator(self) -> TensorDictSequential:
        """``common -> policy``, probabilistic when the policy is."""
        return _chain(self.get_head(0), self.get_head(1))

    def get_value_operator(self) -> TensorDictSequential:
        """``common -> value``."""
        return TensorDictSequential(self.get_head(0), self.get_head(2))

    def get_policy_head(self) -> TensorDictModuleBase:
        """The policy head alone (reads the hidden representation)."""
        return self.get_head(1)

    def get_value_head(self) -> TensorDictModuleBase:
        """The value head alone (reads the hidden representation)."""
        return self.get_head(2)


class ActorCriticOperator(ActorValueOperator):
    """An actor and a Q-value critic sharing a trunk: ``common -> policy -> critic(hidden, action)``.

    The critic reads the action the policy wrote, so the whole module *is* the critic
    (:meth:`get_critic_operator`); there is no stand-alone state-value operator.

    Args:
        common_operator: reads observations, writes a hidden representation.
        policy_operator: reads the hidden representation, writes the action.
        value_operator: reads the hidden representation and the action, writes
            ``"state_action_value"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> common = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        >>> policy = Actor(nn.Linear(8, 2), in_keys=["hidden"])
        >>> class Cat(nn.Module):
        ...     def __init__(self, net): super().__init__(); self.net = net
        ...     def forward(self, h, a): return self.net(torch.cat([h, a], -1))
        >>> critic = ValueOperator(Cat(nn.Linear(10, 1)), in_keys=["hidden", "action"])
        >>> op = ActorCriticOperator(common, policy, critic)
        >>> op(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))["state_action_value"].shape
        torch.Size([4, 1])
    """

    def get_critic_operator(self) -> ActorCriticOperator:
        """The whole module: ``common -> policy -> critic``."""
        return self

    def get_value_operator(self) -> TensorDictSequential:
        raise RuntimeError(
            "ActorCriticOperator's value head needs the action: use get_critic_operator() "
            "(common -> policy -> critic), or ActorValueOperator for a state-value head"
        )


class ActorCriticWrapper(TensorDictSequential):
    """An actor and a value network without a shared trunk: ``policy -> value``.

    Args:
        policy_operator: reads observations, writes the action.
        value_operator: reads observations (and maybe the action), writes a value.

    Examples:
        >>> from tensordict import TensorDict
        >>> op = ActorCriticWrapper(Actor(nn.Linear(3, 2)), ValueOperator(nn.Linear(3, 1)))
        >>> td = op(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))
        >>> td["action"].shape, td["state_value"].shape
        (torch.Size([4, 2]), torch.Size([4, 1]))
        >>> op.get_policy_operator() is op.module[0]
        True
    """

    def __init__(
        self, policy_operator: TensorDictModuleBase, value_operator: TensorDictModuleBase
    ) -> None:
        super().__init__(policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictModuleBase:
        """The policy."""
        return cast(TensorDictModuleBase, self.module[0])

    def get_value_operator(self) -> TensorDictModuleBase:
        """The value network."""
        return cast(TensorDictModuleBase, self.module[1])

    get_policy_head = get_policy_operator
    get_value_head = get_value_operator


class WorldModelWrapper(TensorDictSequential):
    """A world model: a transition model then a reward model (model-based RL, e.g. Dreamer).

    Args:
        transition_model: reads state and action, writes the next state.
        reward_model: reads the (next) state, writes the reward.

    Examples:
        >>> from tensordict import TensorDict
        >>> transition = TensorDictModule(nn.Linear(4, 3), ["state_action"], [("next", "state")])
        >>> reward = TensorDictModule(nn.Linear(3, 1), [("next", "state")], [("next", "reward")])
        >>> model = WorldModelWrapper(transition, reward)
        >>> model(TensorDict(state_action=torch.zeros(2, 4), batch_size=[2]))["next", "reward"].shape
        torch.Size([2, 1])
    """

    def __init__(
        self, transition_model: TensorDictModuleBase, reward_model: TensorDictModuleBase
    ) -> None:
        super().__init__(transition_model, reward_model)

    def get_transition_model_operator(self) -> TensorDictModuleBase:
        """The transition model."""
        return cast(TensorDictModuleBase, self.module[0])

    def get_reward_operator(self) -> TensorDictModuleBase:
        """The reward model."""
        return cast(TensorDictModuleBase, self.module[1])
