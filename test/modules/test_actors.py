"""Behaviour of actors, value operators and Q-value modules."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)
from torch import distributions as D
from torch import nn

from torchrl.data import Bounded, Categorical, Composite, OneHot
from torchrl.modules import (
    MLP,
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    DistributionalQValueActor,
    DistributionalQValueModule,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    TanhModule,
    TanhNormal,
    ValueOperator,
    WorldModelWrapper,
)


def _obs(batch=8, dim=3):
    return TensorDict(observation=torch.randn(batch, dim) * 10, batch_size=[batch])


def _param_net(n_act=2):
    return TensorDictModule(
        nn.Sequential(MLP(in_features=3, out_features=2 * n_act, depth=1), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )


class TestActor:
    def test_defaults_and_safe(self):
        spec = Bounded(-0.5, 0.5, shape=(2,))
        actor = Actor(nn.Linear(3, 2), spec=spec, safe=True)
        assert actor.in_keys == ["observation"] and actor.out_keys == ["action"]
        assert isinstance(actor.spec, Composite) and actor.spec["action"] is spec
        td = actor(_obs())
        assert spec.is_in(td["action"])
        unsafe = Actor(actor.module, spec=spec)(_obs())
        assert not spec.is_in(unsafe["action"])

    def test_errors(self):
        with pytest.raises(ValueError, match="spec"):
            Actor(nn.Linear(3, 2), safe=True)


class TestProbabilisticActor:
    def test_tanh_normal_within_bounds(self):
        spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]))
        actor = ProbabilisticActor(
            _param_net(),
            in_keys=["loc", "scale"],
            spec=spec,
            distribution_class=TanhNormal,
            distribution_kwargs={"low": spec.low, "high": spec.high},
            return_log_prob=True,
        )
        with set_interaction_type(InteractionType.RANDOM):
            td = actor(_obs(100))
        assert spec.is_in(td["action"]) and td["action_log_prob"].shape == (100,)
        dist = actor.get_dist(td)
        torch.testing.assert_close(
            dist.log_prob(td["action"]), td["action_log_prob"], rtol=1e-3, atol=1e-3
        )
        with set_interaction_type(InteractionType.DETERMINISTIC):
            td_det = actor(td.clone())
        torch.testing.assert_close(td_det["action"], dist.deterministic_sample)

    def test_default_interaction_is_deterministic(self):
        actor = ProbabilisticActor(
            _param_net(), in_keys=["loc", "scale"], distribution_class=D.Normal
        )
        td = actor(_obs())
        torch.testing.assert_close(td["action"], td["loc"])

    def test_safe_projects_samples(self):
        spec = Bounded(-0.1, 0.1, shape=(2,))
        kwargs = {"in_keys": ["loc", "scale"], "distribution_class": D.Normal, "spec": spec}
        net = _param_net()
        with set_interaction_type(InteractionType.RANDOM):
            unsafe = ProbabilisticActor(net, **kwargs)(_obs(200))
            safe = ProbabilisticActor(net, safe=True, **kwargs)(_obs(200))
        assert not spec.is_in(unsafe["action"])
        assert spec.is_in(safe["action"])

    def test_discrete(self):
        net = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["logits"])
        spec = OneHot(4)
        actor = ProbabilisticActor(
            net, in_keys=["logits"], spec=spec, safe=True, distribution_class=OneHotCategorical
        )
        with set_interaction_type(InteractionType.RANDOM):
            td = actor(_obs())
        assert spec.is_in(td["action"])
        assert isinstance(actor, ProbabilisticTensorDictSequential)

    def test_errors(self):
        with pytest.raises(TypeError, match="tensordict module"):
            ProbabilisticActor(nn.Linear(3, 4), in_keys=["loc"])
        with pytest.raises(ValueError, match="spec"):
            ProbabilisticActor(_param_net(), in_keys=["loc", "scale"], safe=True)


def test_value_operator_default_keys():
    v = ValueOperator(nn.Linear(3, 1))
    assert v.out_keys == ["state_value"]
    q = ValueOperator(
        MLP(in_features=4, out_features=1, depth=1), in_keys=["observation", "action"]
    )
    assert q.out_keys == ["state_action_value"]
    td = _obs().set("action", torch.randn(8, 1))
    assert q(td)["state_action_value"].shape == (8, 1)


class TestTanhModule:
    def test_bounds_from_spec_and_override(self):
        spec = Bounded(torch.tensor([0.0, -2.0]), torch.tensor([1.0, 2.0]))
        mod = TanhModule(["raw"], ["action"], spec=spec)
        td = mod(TensorDict(raw=torch.randn(50, 2) * 10, batch_size=[50]))
        assert spec.is_in(td["action"])
        torch.testing.assert_close(
            mod(TensorDict(raw=torch.zeros(2)))["action"], torch.tensor([0.5, 0.0])
        )
        mod = TanhModule(["raw"], ["action"], spec=spec, high=torch.tensor([3.0, 4.0]))
        torch.testing.assert_close(
            mod(TensorDict(raw=torch.zeros(2)))["action"], torch.tensor([1.5, 1.0])
        )

    def test_clamp(self):
        mod = TanhModule(["a"], clamp=True)
        out = mod(TensorDict(a=torch.tensor([1e3, -1e3])))["a"]
        assert (out.abs() < 1).all() and torch.isfinite(torch.atanh(out)).all()
        with pytest.raises(ValueError, match="high must exceed low"):
            TanhModule(["a"], low=1.0, high=0.0)


class TestActorCritic:
    def _parts(self):
        common = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        net = TensorDictModule(
            nn.Sequential(nn.Linear(8, 4), NormalParamExtractor()), ["hidden"], ["loc", "scale"]
        )
        policy = ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal)
        return common, policy

    def test_actor_value_operator(self):
        common, policy = self._parts()
        value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        op = ActorValueOperator(common, policy, value)
        td = op(_obs())
        assert {"action", "state_value", "hidden"} <= set(td.keys())
        policy_op = op.get_policy_operator()
        assert isinstance(policy_op, ProbabilisticTensorDictSequential)
        assert isinstance(policy_op.get_dist(_obs()), TanhNormal)
        value_op = op.get_value_operator()
        assert "action" not in value_op(_obs()).keys()
        # Heads share the trunk's parameters.
        assert policy_op.module[0] is value_op.module[0] is common
        assert op.get_policy_head() is policy and op.get_value_head() is value

    def test_policy_operator_keeps_safety(self):
        spec = Bounded(-0.1, 0.1, shape=(2,))
        common = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        net = TensorDictModule(
            nn.Sequential(nn.Linear(8, 4), NormalParamExtractor()), ["hidden"], ["loc", "scale"]
        )
        policy = ProbabilisticActor(
            net, in_keys=["loc", "scale"], distribution_class=D.Normal, spec=spec, safe=True
        )
        op = ActorValueOperator(common, policy, ValueOperator(nn.Linear(8, 1), in_keys=["hidden"]))
        policy_op = op.get_policy_operator()
        assert isinstance(policy_op, ProbabilisticActor) and policy_op.safe
        with set_interaction_type(InteractionType.RANDOM):
            assert spec.is_in(policy_op(_obs(100))["action"])
            assert spec.is_in(op(_obs(100))["action"])

    def test_actor_critic_operator(self):
        common, policy = self._parts()
        critic = ValueOperator(
            MLP(in_features=10, out_features=1, depth=1), in_keys=["hidden", "action"]
        )
        op = ActorCriticOperator(common, policy, critic)
        assert op(_obs())["state_action_value"].shape == (8, 1)
        assert op.get_critic_operator() is op
        with pytest.raises(RuntimeError, match="get_critic_operator"):
            op.get_value_operator()

    def test_actor_critic_wrapper(self):
        policy = Actor(nn.Linear(3, 2))
        value = ValueOperator(nn.Linear(3, 1))
        op = ActorCriticWrapper(policy, value)
        td = op(_obs())
        assert td["action"].shape == (8, 2) and td["state_value"].shape == (8, 1)
        assert op.get_policy_operator() is policy and op.get_value_operator() is value


def test_world_model_wrapper():
    transition = TensorDictModule(nn.Linear(4, 3), ["obs_action"], [("next", "observation")])
    reward = TensorDictModule(nn.Linear(3, 1), [("next", "observation")], [("next", "reward")])
    model = WorldModelWrapper(transition, reward)
    td = model(TensorDict(obs_action=torch.randn(5, 4), batch_size=[5]))
    assert td["next", "reward"].shape == (5, 1)
    assert model.get_transition_model_operator() is transition
    assert model.get_reward_operator() is reward


class TestQValue:
    values = torch.tensor([[1.0, 5.0, 3.0], [4.0, 0.0, -1.0]])
    mask = torch.tensor([[True, False, True], [False, True, True]])

    def test_one_hot_and_categorical(self):
        td = TensorDict(action_value=self.values, batch_size=[2])
        out = QValueModule("one_hot")(td.clone())
        torch.testing.assert_close(out["action"], torch.tensor([[0, 1, 0], [1, 0, 0]]))
        torch.testing.assert_close(out["chosen_action_value"], torch.tensor([[5.0], [4.0]]))
        out = QValueModule("categorical")(td.clone())
        torch.testing.assert_close(out["action"], torch.tensor([1, 0]))

    def test_mask_respected(self):
        td = TensorDict(action_value=self.values, action_mask=self.mask, batch_size=[2])
        out = QValueModule("categorical", action_mask_key="action_mask")(td)
        torch.testing.assert_close(out["action"], torch.tensor([2, 1]))
        torch.testing.assert_close(out["chosen_action_value"], torch.tensor([[3.0], [0.0]]))
        with pytest.raises(KeyError, match="action_mask"):
            QValueModule("categorical", action_mask_key="action_mask")(
                TensorDict(action_value=self.values, batch_size=[2])
            )

    def test_from_spec(self):
        module = QValueModule(spec=OneHot(3))
        assert module.action_space == "one_hot"
        out = module(TensorDict(action_value=self.values, batch_size=[2]))
        assert out["action"].dtype == torch.bool and OneHot(3).is_in(out["action"])
        assert QValueModule(spec=Categorical(3)).action_space == "categorical"
        with pytest.raises(ValueError, match="action_space"):
            QValueModule()
        with pytest.raises(ValueError, match="action_space must be"):
            QValueModule("binary")

    def test_multi_discrete(self):
        values = torch.tensor([[1.0, 2.0, 0.0, 3.0, 1.0]])
        td = TensorDict(action_value=values, batch_size=[1])
        out = QValueModule("mult_one_hot", var_nums=[2, 3])(td.clone())
        torch.testing.assert_close(out["action"], torch.tensor([[0, 1, 0, 1, 0]]))
        torch.testing.assert_close(out["chosen_action_value"], torch.tensor([[5.0]]))
        out = QValueModule("multi_categorical", var_nums=[2, 3])(td.clone())
        torch.testing.assert_close(out["action"], torch.tensor([[1, 1]]))

    def test_qvalue_actor(self):
        actor = QValueActor(nn.Linear(3, 4), spec=OneHot(4), action_mask_key="action_mask")
        mask = torch.zeros(8, 4, dtype=torch.bool)
        mask[:, 2] = True
        td = actor(_obs().set("action_mask", mask))
        assert (td["action"].long().argmax(-1) == 2).all()
        net = TensorDictModule(nn.Linear(3, 4), ["observation"], ["action_value"])
        actor = QValueActor(net, action_space="categorical")
        assert actor(_obs())["action"].shape == (8,)
        with pytest.raises(KeyError, match="action_value"):
            QValueActor(
                TensorDictModule(nn.Linear(3, 4), ["observation"], ["q"]), action_space="one_hot"
            )

    def test_distributional(self):
        support = torch.linspace(-1, 1, 5)
        net = MLP(in_features=3, out_features=(5, 4), depth=1)
        actor = DistributionalQValueActor(net, support, action_space="categorical")
        td = actor(_obs())
        log_p = td["action_value"]
        assert log_p.shape == (8, 5, 4)
        torch.testing.assert_close(log_p.exp().sum(-2), torch.ones(8, 4))
        q = (log_p.exp() * support[:, None]).sum(-2)
        torch.testing.assert_close(td["action"], q.argmax(-1))
        with pytest.raises(ValueError, match="n_atoms=3"):
            DistributionalQValueModule("categorical", torch.zeros(3))(
                TensorDict(action_value=torch.zeros(2, 5, 4), batch_size=[2])
            )
