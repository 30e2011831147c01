"""Exploration modules: active only while exploring, annealing, masks, per-env OU state."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, TensorDictModule, set_interaction_type
from torch import nn

from torchrl.data import Bounded, Categorical, Composite, OneHot
from torchrl.modules import (
    Actor,
    AdditiveGaussianModule,
    AdditiveGaussianWrapper,
    EGreedyModule,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessModule,
    OrnsteinUhlenbeckProcessWrapper,
    QValueActor,
)

NOT_EXPLORING = [InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN]


def _td(action, **kwargs):
    return TensorDict(action=action, batch_size=action.shape[:1], **kwargs)


class TestEGreedy:
    def test_eps_one_and_zero(self):
        action = torch.zeros(2000, dtype=torch.long)
        out = EGreedyModule(Categorical(4), eps_init=1.0)(_td(action.clone()))["action"]
        # eps = 1: uniform actions, about a quarter of them 0.
        counts = torch.bincount(out, minlength=4).float() / 2000
        assert (counts - 0.25).abs().max() < 0.05
        out = EGreedyModule(Categorical(4), eps_init=0.0, eps_end=0.0)(_td(action.clone()))
        assert (out["action"] == 0).all()

    def test_fraction_follows_eps(self):
        module = EGreedyModule(OneHot(10), eps_init=0.5, eps_end=0.5)
        greedy = torch.nn.functional.one_hot(torch.zeros(20000, dtype=torch.long), 10).bool()
        out = module(_td(greedy.clone()))["action"]
        assert OneHot(10).is_in(out)
        changed = (out != greedy).any(-1).float().mean()
        # P(changed) = eps * 9/10 = 0.45
        assert abs(changed.item() - 0.45) < 0.02

    @pytest.mark.parametrize("itype", NOT_EXPLORING)
    def test_only_random_mode_explores(self, itype):
        module = EGreedyModule(Categorical(4), eps_init=1.0)
        action = torch.zeros(500, dtype=torch.long)
        with set_interaction_type(itype):
            assert (module(_td(action.clone()))["action"] == 0).all()
        with set_interaction_type(InteractionType.RANDOM):
            assert (module(_td(action.clone()))["action"] != 0).any()
        # No type set counts as exploring (training code outside any context).
        assert (module(_td(action.clone()))["action"] != 0).any()

    def test_annealing(self):
        module = EGreedyModule(Categorical(2), eps_init=1.0, eps_end=0.2, annealing_num_steps=8)
        module.step(2)
        assert module.eps.item() == pytest.approx(0.8)
        module.step(100)
        assert module.eps.item() == pytest.approx(0.2)
        assert "eps" in module.state_dict()
        rising = EGreedyModule(Categorical(2), eps_init=0.0, eps_end=0.5, annealing_num_steps=4)
        rising.step(10)
        assert rising.eps.item() == pytest.approx(0.5)

    @pytest.mark.parametrize("spec", [OneHot(5), Categorical(5)])
    def test_mask_respected(self, spec):
        mask = torch.zeros(1000, 5, dtype=torch.bool)
        mask[:, 1] = True
        mask[::2, 3] = True
        greedy = spec.zero((1000,))
        module = EGreedyModule(spec, eps_init=1.0, action_mask_key="action_mask")
        out = module(_td(greedy, action_mask=mask))["action"]
        index = out.long().argmax(-1) if out.ndim == 2 else out
        assert mask.gather(-1, index[:, None]).all()
        assert (index[::2] == 3).any() and (index == 1).any()

    def test_composite_spec_and_errors(self):
        module = EGreedyModule(Composite(action=Categorical(3)))
        assert isinstance(module.spec, Categorical)
        with pytest.raises(ValueError, match="spec"):
            EGreedyModule(None)
        with pytest.raises(KeyError, match="mask"):
            EGreedyModule(Categorical(3), action_mask_key="mask")(
                _td(torch.zeros(2, dtype=torch.long))
            )


class TestAdditiveGaussian:
    def test_noise_statistics_and_projection(self):
        module = AdditiveGaussianModule(sigma_init=0.5, sigma_end=0.5, mean=1.0, std=2.0)
        out = module(_td(torch.zeros(20000, 1)))["action"]
        assert abs(out.mean().item() - 0.5) < 0.03 and abs(out.std().item() - 1.0) < 0.03
        spec = Bounded(-0.1, 0.1, shape=(1,))
        out = AdditiveGaussianModule(spec, sigma_init=5.0)(_td(torch.zeros(100, 1)))["action"]
        assert spec.is_in(out) and (out.abs() == 0.1).any()

    @pytest.mark.parametrize("itype", NOT_EXPLORING)
    def test_only_random_mode_explores(self, itype):
        module = AdditiveGaussianModule()
        with set_interaction_type(itype):
            assert (module(_td(torch.zeros(10, 2)))["action"] == 0).all()

    def test_annealing(self):
        module = AdditiveGaussianModule(sigma_init=1.0, sigma_end=0.1, annealing_num_steps=10)
        module.step(5)
        assert module.sigma.item() == pytest.approx(0.55)
        module.step(50)
        assert module.sigma.item() == pytest.approx(0.1)
        out = module(_td(torch.zeros(20000, 1)))["action"]
        assert abs(out.std().item() - 0.1) < 0.005


class TestOrnsteinUhlenbeck:
    def test_per_env_state_and_reset(self):
        module = OrnsteinUhlenbeckProcessModule(eta=1.0, sigma=1.0, theta=0.5, dt=0.1)
        is_init = torch.ones(3, 1, dtype=torch.bool)
        td = module(_td(torch.zeros(3, 2), is_init=is_init))
        assert td["_ou_steps"].tolist() == [1, 1, 1]
        first = td["_ou_prev_noise"].clone()
        torch.testing.assert_close(td["action"], first)
        # Next step: env 1 restarts, the others continue their process.
        td = _td(
            torch.zeros(3, 2),
            is_init=torch.tensor([[False], [True], [False]]),
            _ou_prev_noise=first,
            _ou_steps=td["_ou_steps"],
        )
        td = module(td)
        assert td["_ou_steps"].tolist() == [2, 1, 2]

    def test_autocorrelation(self):
        module = OrnsteinUhlenbeckProcessModule(eta=1.0, sigma=1.0, theta=0.15, dt=0.01)
        td = _td(torch.zeros(500, 1), is_init=torch.ones(500, 1, dtype=torch.bool))
        noises = []
        for _ in range(20):
            td = module(td)
            noises.append(td["_ou_prev_noise"].clone())
            td["action"] = torch.zeros(500, 1)
            td["is_init"] = torch.zeros(500, 1, dtype=torch.bool)
        a, b = noises[-2].flatten(), noises[-1].flatten()
        assert torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.8

    def test_annealing_and_projection(self):
        spec = Bounded(-0.01, 0.01, shape=(1,))
        module = OrnsteinUhlenbeckProcessModule(
            spec,
            eta=1.0,
            sigma=2.0,
            sigma_min=0.5,
            n_steps_annealing=10,
            eta_end=0.0,
            annealing_num_steps=4,
        )
        steps = torch.tensor([0.0, 5.0, 100.0])
        torch.testing.assert_close(module._current_sigma(steps), torch.tensor([2.0, 1.25, 0.5]))
        out = module(_td(torch.zeros(50, 1)))["action"]
        assert spec.is_in(out)
        module.step(2)
        assert module.eps.item() == pytest.approx(0.5)
        with set_interaction_type(InteractionType.DETERMINISTIC):
            td = module(_td(torch.zeros(2, 1)))
        assert "_ou_prev_noise" not in td.keys()


class TestWrappers:
    def test_egreedy_wrapper_reads_policy_spec(self):
        policy = QValueActor(nn.Linear(3, 4), spec=OneHot(4))
        wrapped = EGreedyWrapper(policy, eps_init=1.0, eps_end=0.0, annealing_num_steps=4)
        assert wrapped.policy is policy and isinstance(wrapped.exploration_module.spec, OneHot)
        td = wrapped(TensorDict(observation=torch.randn(100, 3), batch_size=[100]))
        assert OneHot(4).is_in(td["action"])
        wrapped.step(4)
        assert wrapped.exploration_module.eps.item() == 0.0
        greedy = policy(TensorDict(observation=td["observation"], batch_size=[100]))["action"]
        torch.testing.assert_close(wrapped(td.clone())["action"], greedy)

    def test_gaussian_and_ou_wrappers(self):
        spec = Bounded(-1.0, 1.0, shape=(1,))
        actor = Actor(nn.Linear(3, 1), spec=spec)
        obs = TensorDict(observation=torch.randn(50, 3), batch_size=[50])
        for wrapper in (
            AdditiveGaussianWrapper(actor, sigma_init=5.0),
            OrnsteinUhlenbeckProcessWrapper(actor, eta=50.0),
        ):
            td = wrapper(obs.clone())
            assert spec.is_in(td["action"])
            with set_interaction_type(InteractionType.DETERMINISTIC):
                torch.testing.assert_close(
                    wrapper(obs.clone())["action"], actor(obs.clone())["action"]
                )
        plain = TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"])
        wrapper = AdditiveGaussianWrapper(
            plain, sigma_init=2.0, sigma_end=1.0, annealing_num_steps=2
        )
        assert wrapper.exploration_module.spec is None
        wrapper.step(1)
        assert wrapper.exploration_module.sigma.item() == pytest.approx(1.5)
