"""Model-based envs: a learned model behind the env contract (ModelBasedEnvBase and friends)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import Bounded, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.envs import EnvBase, TransformedEnv
from torchrl.envs.model_based import (
    DreamerDecoder,
    DreamerEnv,
    ImaginedEnv,
    ModelBasedEnvBase,
    WorldModelEnv,
)
from torchrl.envs.utils import check_env_specs
from torchrl.modules import CEMPlanner, MPPIPlanner

OBS, ACT = 3, 2


# ------------------------------------------------------------------------------ stand-ins
class LinearDynamics(nn.Module):
    """``s' = A s + B a``, reward ``-|s'|^2``; ``terminated`` once ``|s'|_inf > limit``."""

    def __init__(self, dtype=torch.float32, limit=None):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A = nn.Parameter(torch.randn(OBS, OBS, generator=g, dtype=dtype) * 0.5)
        self.B = nn.Parameter(torch.randn(OBS, ACT, generator=g, dtype=dtype) * 0.5)
        self.limit = limit

    def forward(self, obs, action):
        nxt = obs @ self.A.T + action @ self.B.T
        reward = -nxt.pow(2).sum(-1, keepdim=True)
        if self.limit is None:
            return nxt, reward
        return nxt, reward, nxt.abs().amax(-1, keepdim=True) > self.limit


def linear_model(dtype=torch.float32, limit=None):
    out_keys = ["observation", "reward"] + ([] if limit is None else ["terminated"])
    return TensorDictModule(LinearDynamics(dtype, limit), ["observation", "action"], out_keys)


def starts_sampler(dtype=torch.float32):
    def sample(shape):
        return TensorDict(observation=torch.randn(*shape, OBS, dtype=dtype), batch_size=shape)

    return sample


def make_env(dtype=torch.float32, limit=None, start_states="sampler", **kwargs):
    if start_states == "sampler":
        start_states = starts_sampler(dtype)
    return WorldModelEnv(
        linear_model(dtype, limit),
        observation_spec=Composite(observation=Unbounded(shape=(OBS,), dtype=dtype)),
        action_spec=Bounded(-1.0, 1.0, shape=(ACT,), dtype=dtype),
        reward_spec=Unbounded(shape=(1,), dtype=dtype),
        start_states=start_states,
        **kwargs,
    )


class RealEnv(EnvBase):
    """A tiny real env with the model's specs (for ``set_specs_from_env`` and ``base_env``)."""

    def __init__(self, batch_size=(), latent=True):
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        latents = {"state": Unbounded(shape=(*batch, 4)), "belief": Unbounded(shape=(*batch, 6))}
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*batch, OBS)),
            **(latents if latent else {}),
            shape=batch,
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch, ACT))

    def _reset(self, tensordict, **kwargs):
        return self.full_observation_spec.zero()

    def _step(self, tensordict):
        out = self.full_observation_spec.zero()
        out.set("reward", torch.zeros(*self.batch_size, 1))
        return out

    def _set_seed(self, seed):
        pass


# ------------------------------------------------------------------------------- WorldModelEnv
@pytest.mark.parametrize("batch_size", [[], [3]])
def test_world_model_env_passes_check_env_specs(batch_size):
    env = make_env(batch_size=batch_size)
    check_env_specs(env, seed=0)
    assert not env.batch_locked
    rollout = env.rollout(4)
    assert rollout.batch_size == torch.Size([*batch_size, 4])
    # The next state is the model's: A s + B a.
    model = env.world_model.module
    expected = rollout["observation"] @ model.A.T + rollout["action"] @ model.B.T
    torch.testing.assert_close(rollout["next", "observation"], expected)
    torch.testing.assert_close(rollout["next", "reward"], -expected.pow(2).sum(-1, keepdim=True))
    # The step keeps the current state at the root: the model wrote into a copy.
    torch.testing.assert_close(rollout["observation"][..., 1:, :], expected[..., :-1, :])


def test_start_state_pool_is_sampled_with_the_env_seed():
    pool = TensorDict(observation=torch.arange(10.0).unsqueeze(-1).expand(10, OBS), batch_size=[10])
    env = make_env(start_states=pool, batch_size=[6])
    check_env_specs(env, seed=0)
    env.set_seed(3)
    first = env.reset()["observation"]
    env.set_seed(3)
    second = env.reset()["observation"]
    assert torch.equal(first, second)
    assert first.shape == (6, OBS)
    assert set(first[:, 0].tolist()) <= set(range(10))


def test_reset_states_from_the_reset_tensordict_win_over_the_sampler():
    env = make_env(batch_size=[2])
    starts = TensorDict(observation=torch.full((2, OBS), 7.0), batch_size=[2])
    td = env.reset(starts.clone())
    assert torch.equal(td["observation"], starts["observation"])
    rollout = env.rollout(3, tensordict=starts)
    assert torch.equal(rollout[:, 0]["observation"], starts["observation"])


def test_batch_unlocked_accepts_any_batch_of_starts():
    env = make_env(start_states=None)
    for shape in ([3], [5], [2, 4]):
        starts = TensorDict(observation=torch.randn(*shape, OBS), batch_size=shape)
        rollout = env.rollout(4, tensordict=starts)
        assert rollout.batch_size == torch.Size([*shape, 4])
        assert rollout["next", "reward"].shape == torch.Size([*shape, 4, 1])
    # With a sampler, resets of different batch sizes in a row.
    env = make_env()
    for n in (1, 7, 3):
        td = env.reset(TensorDict(batch_size=[n]))
        assert td["observation"].shape == (n, OBS)
        assert env.step(env.rand_action(td))["next", "observation"].shape == (n, OBS)


def test_partial_resets_draw_new_starts_from_the_sampler():
    env = make_env(limit=1.5, batch_size=[8])
    rollout = env.rollout(30, break_when_any_done=False)
    assert rollout.batch_size == torch.Size([8, 30])
    done = rollout["next", "done"].squeeze(-1)
    assert done.any(), "the stand-in model should end some episodes"
    # After a done, the next step starts from a fresh (sampled) state, not the final one.
    b, t = done[:, :-1].nonzero()[0].tolist()
    assert not torch.equal(rollout[b, t + 1]["observation"], rollout[b, t]["next", "observation"])
    check_env_specs(env, seed=0)


def test_collector_runs_on_world_model_env_unchanged():
    env = make_env(limit=1.5, batch_size=[4])
    policy = TensorDictModule(
        nn.Sequential(nn.Linear(OBS, ACT), nn.Tanh()), ["observation"], ["action"]
    )
    collector = SyncDataCollector(env, policy, frames_per_batch=40, total_frames=120)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 3
    for batch in batches:
        assert batch.numel() == 40
        assert batch["next", "observation"].shape[-1] == OBS
        assert ("collector", "traj_ids") in batch.keys(True)
    assert any(b["next", "done"].any() for b in batches)


class TargetDynamics(nn.Module):
    """The observation is a target that never moves; reward ``-|a - target|^2``."""

    def forward(self, obs, action):
        return obs.clone(), -(action - obs[..., :ACT]).pow(2).sum(-1, keepdim=True)


def target_env():
    model = TensorDictModule(TargetDynamics(), ["observation", "action"], ["observation", "reward"])
    return WorldModelEnv(
        model,
        observation_spec=Composite(observation=Unbounded(shape=(OBS,))),
        action_spec=Bounded(-2.0, 2.0, shape=(ACT,)),
        start_states=lambda shape: TensorDict(
            observation=torch.rand(*shape, OBS) * 2 - 1, batch_size=shape
        ),
    )


def test_cem_planner_runs_on_world_model_env_unchanged():
    env = target_env()
    planner = CEMPlanner(env, planning_horizon=2, optim_steps=6, num_candidates=200, top_k=20)
    td = env.reset(TensorDict(batch_size=[3]))
    action = planner(td.clone())["action"]
    assert action.shape == (3, ACT)
    assert (action - td["observation"][..., :ACT]).abs().max() < 0.25
    rollout = env.rollout(3, planner, tensordict=td)
    assert rollout.batch_size == torch.Size([3, 3])


def test_mppi_planner_runs_on_world_model_env_unchanged():
    env = target_env()

    def reward_to_go(rollout):
        reward = rollout["next", "reward"]
        rollout["advantage"] = reward.flip(-2).cumsum(-2).flip(-2)
        return rollout

    planner = MPPIPlanner(
        env,
        reward_to_go,
        temperature=0.1,
        planning_horizon=2,
        optim_steps=6,
        num_candidates=200,
        top_k=20,
    )
    td = env.reset(TensorDict(batch_size=[2]))
    action = planner(td.clone())["action"]
    assert (action - td["observation"][..., :ACT]).abs().max() < 0.3


# -------------------------------------------------------------------------------- gradients
def _imagined_return(env, policy, starts, horizon=4):
    rollout = env.rollout(horizon, policy, tensordict=starts)
    return rollout["next", "reward"].sum()


def _finite_difference(fn, tensor, eps=1e-6):
    grad = torch.zeros_like(tensor)
    flat = grad.view(-1)
    with torch.no_grad():
        for i in range(tensor.numel()):
            original = tensor.view(-1)[i].item()
            tensor.view(-1)[i] = original + eps
            plus = fn().item()
            tensor.view(-1)[i] = original - eps
            minus = fn().item()
            tensor.view(-1)[i] = original
            flat[i] = (plus - minus) / (2 * eps)
    return grad


def test_gradients_through_an_imagined_rollout_match_finite_differences():
    dtype = torch.float64
    env = WorldModelEnv(
        linear_model(dtype),
        observation_spec=Composite(observation=Unbounded(shape=(OBS,), dtype=dtype)),
        action_spec=Unbounded(shape=(ACT,), dtype=dtype),
        reward_spec=Unbounded(shape=(1,), dtype=dtype),
    )
    policy_net = nn.Linear(OBS, ACT, dtype=dtype)
    policy = TensorDictModule(policy_net, ["observation"], ["action"])
    starts = TensorDict(observation=torch.randn(5, OBS, dtype=dtype), batch_size=[5])
    start_obs = starts["observation"].requires_grad_()

    loss = _imagined_return(env, policy, starts)
    tensors = [policy_net.weight, policy_net.bias, env.world_model.module.A, start_obs]
    grads = torch.autograd.grad(loss, tensors)
    for tensor, grad in zip(tensors, grads):
        numeric = _finite_difference(lambda: _imagined_return(env, policy, starts), tensor)
        torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-7)


def test_gradients_flow_to_given_params():
    dtype = torch.float64
    model = linear_model(dtype)
    params = TensorDict.from_module(model).clone().apply(lambda t: t.detach().requires_grad_())
    specs = dict(
        observation_spec=Composite(observation=Unbounded(shape=(OBS,), dtype=dtype)),
        action_spec=Unbounded(shape=(ACT,), dtype=dtype),
        reward_spec=Unbounded(shape=(1,), dtype=dtype),
    )
    functional = WorldModelEnv(model, params=params, **specs)
    own = WorldModelEnv(model, **specs)
    starts = TensorDict(observation=torch.randn(4, OBS, dtype=dtype), batch_size=[4])
    actions = torch.randn(4, ACT, dtype=dtype)

    def policy(td):
        return td.set("action", actions)

    loss_f = _imagined_return(functional, policy, starts, horizon=3)
    loss_o = _imagined_return(own, policy, starts, horizon=3)
    torch.testing.assert_close(loss_f, loss_o)
    loss_f.backward()
    loss_o.backward()
    torch.testing.assert_close(params["module", "A"].grad, model.module.A.grad)
    # A list of tensors in parameter order works too.
    as_list = WorldModelEnv(model, params=[params["module", "A"], params["module", "B"]], **specs)
    torch.testing.assert_close(_imagined_return(as_list, policy, starts, horizon=3), loss_o)


# ------------------------------------------------------------------------------- ImaginedEnv
def _buffer(n=50, batch_size=None):
    rb = ReplayBuffer(storage=LazyTensorStorage(n), batch_size=batch_size)
    obs = torch.arange(float(n)).unsqueeze(-1).expand(n, OBS)
    rb.extend(TensorDict(observation=obs, action=torch.zeros(n, ACT), batch_size=[n]))
    return rb


def imagined_env(rb, **kwargs):
    return ImaginedEnv(
        linear_model(limit=kwargs.pop("limit", None)),
        rb,
        observation_spec=Composite(observation=Unbounded(shape=(OBS,))),
        action_spec=Bounded(-1.0, 1.0, shape=(ACT,)),
        **kwargs,
    )


def test_imagined_env_starts_from_replay_buffer_samples():
    env = imagined_env(_buffer(batch_size=16))
    td = env.reset()  # batch [] env: the buffer's own batch size
    assert td.batch_size == torch.Size([16])
    assert set(td.keys()) >= {"observation", "done"}
    assert "action" not in td.keys()  # only the state entries of the samples are kept
    values = td["observation"][:, 0]
    assert torch.equal(values, values.round()) and values.min() >= 0 and values.max() < 50
    assert env.rollout(15).batch_size == torch.Size([16, 15])

    env = imagined_env(_buffer(), batch_size=[8])
    check_env_specs(env, seed=0)
    assert env.reset().batch_size == torch.Size([8])
    assert env.reset(TensorDict(batch_size=[2, 3]))["observation"].shape == (2, 3, OBS)


def test_imagined_env_resets_finished_starts_from_the_buffer():
    env = imagined_env(_buffer(), batch_size=[6], limit=30.0)
    rollout = env.rollout(20, break_when_any_done=False)
    done = rollout["next", "done"].squeeze(-1)
    assert done[:, :-1].any()
    b, t = done[:, :-1].nonzero()[0].tolist()
    restart = rollout[b, t + 1]["observation"]
    assert torch.equal(restart, restart[0].expand(OBS))  # a row of the buffer: (i, i, i)


def test_imagined_env_takes_specs_from_a_base_env():
    env = ImaginedEnv(linear_model(), _buffer(), RealEnv([2], latent=False), batch_size=[4])
    assert env.action_spec.shape == (4, ACT)
    assert env.observation_spec["observation"].shape == (4, OBS)
    check_env_specs(env, seed=0)


# -------------------------------------------------------------------------------- Dreamer
class PriorStandIn(nn.Module):
    """A stand-in for an RSSM prior plus reward head: (state, belief, action) -> next."""

    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(4 + 6 + ACT, 6)
        self.to_state = nn.Linear(6, 4)
        self.reward = nn.Linear(4 + 6, 1)

    def forward(self, state, belief, action):
        belief = torch.tanh(self.cell(torch.cat([state, belief, action], -1)))
        state = self.to_state(belief)
        return state, belief, self.reward(torch.cat([state, belief], -1))


class DecoderStandIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4 + 6, 3 * 4 * 4)

    def forward(self, state, belief):
        out = self.linear(torch.cat([state, belief], -1))
        return out.unflatten(-1, (3, 4, 4))


def dreamer_env(batch_size=(), **kwargs):
    model = TensorDictModule(
        PriorStandIn(), ["state", "belief", "action"], ["state", "belief", "reward"]
    )
    env = DreamerEnv(model, prior_shape=(4,), belief_shape=(6,), batch_size=batch_size, **kwargs)
    env.set_specs_from_env(RealEnv(batch_size=[5]))
    return env


def test_dreamer_env_passes_check_env_specs_and_rolls_out_latents():
    env = dreamer_env(batch_size=[3])
    check_env_specs(env, seed=0)
    assert sorted(env.observation_spec.keys()) == ["belief", "state"]
    assert env.action_spec.shape == (3, ACT)
    starts = TensorDict(state=torch.randn(7, 4), belief=torch.randn(7, 6), batch_size=[7])
    env = dreamer_env()  # batch [] : any batch of starts
    rollout = env.rollout(15, tensordict=starts)
    assert rollout.batch_size == torch.Size([7, 15])
    assert not rollout["next", "done"].any()
    assert torch.equal(rollout[:, 0]["state"], starts["state"])
    # Without given states: the zero initial state.
    assert env.reset()["belief"].abs().sum() == 0


def test_dreamer_decoder_writes_reco_pixels():
    env = dreamer_env(obs_decoder=DecoderStandIn())
    decoded = TransformedEnv(env, DreamerDecoder())
    check_env_specs(decoded, seed=0)
    assert decoded.observation_spec["reco_pixels"].shape == (3, 4, 4)
    rollout = decoded.rollout(3)
    assert rollout["next", "reco_pixels"].shape == (3, 3, 4, 4)
    # A TensorDictModule decoder writes its own out_keys; decode_obs uses obs_decoder.
    td_decoder = TensorDictModule(DecoderStandIn(), ["state", "belief"], ["pixels_hat"])
    out = DreamerDecoder(td_decoder)(rollout.exclude("reco_pixels", "next"))
    assert out["pixels_hat"].shape == (3, 3, 4, 4)
    assert env.decode_obs(rollout.exclude("next"))["reco_pixels"].shape == (3, 3, 4, 4)


def test_dreamer_gradients_reach_the_actor_through_imagination():
    env = dreamer_env()
    actor = TensorDictModule(nn.Linear(10, ACT), ["latent"], ["action"])

    def policy(td):
        td.set("latent", torch.cat([td["state"], td["belief"]], -1))
        return actor(td)

    starts = TensorDict(state=torch.randn(8, 4), belief=torch.randn(8, 6), batch_size=[8])
    env.observation_spec["latent"] = Unbounded(shape=(10,))
    env.empty_cache()
    rollout = env.rollout(5, policy, tensordict=starts)
    rollout["next", "reward"].sum().backward()
    assert actor.module.weight.grad is not None and actor.module.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------- errors
def test_missing_start_states_raise_a_clear_error():
    env = make_env(start_states=None, batch_size=[2])
    with pytest.raises(KeyError, match="needs start states.*'observation'"):
        env.reset()
    with pytest.raises(KeyError, match="needs start states"):
        env.reset(TensorDict(other=torch.zeros(2), batch_size=[2]))
    # Stepping on past a done needs new states: no sampler, a clear error.
    env = make_env(start_states=None, limit=0.1)
    starts = TensorDict(observation=torch.ones(2, OBS), batch_size=[2])
    with pytest.raises(RuntimeError, match="partial reset"):
        env.rollout(5, tensordict=starts, break_when_any_done=False)


def test_bad_start_states_raise():
    env = make_env(
        start_states=lambda shape: TensorDict(obs=torch.zeros(*shape, OBS), batch_size=shape)
    )
    with pytest.raises(KeyError, match="lack the start-state entry 'observation'"):
        env.reset()
    env = make_env(
        start_states=lambda shape: TensorDict(observation=torch.zeros(*shape, 5), batch_size=shape)
    )
    with pytest.raises(ValueError, match=r"'observation'.*shape \[5\].*expected \[3\]"):
        env.reset()
    env = make_env(start_states=lambda shape: {"observation": torch.zeros(*shape, OBS)})
    with pytest.raises(TypeError, match="must return a TensorDict"):
        env.reset()
    with pytest.raises(TypeError, match="start_states"):
        make_env(start_states=3)
    with pytest.raises(TypeError, match="world_model must be a torch.nn.Module"):
        WorldModelEnv(lambda td: td)


def test_wrong_model_keys_raise():
    specs = dict(
        observation_spec=Composite(observation=Unbounded(shape=(OBS,))),
        action_spec=Unbounded(shape=(ACT,)),
        start_states=starts_sampler(),
    )
    no_reward = TensorDictModule(nn.Linear(OBS + ACT, OBS), ["observation"], ["observation"])
    with pytest.raises(KeyError, match="reward key.*'reward'"):
        WorldModelEnv(no_reward, **specs).reset()
    wrong_state = TensorDictModule(
        LinearDynamics(), ["observation", "action"], ["next_obs", "reward"]
    )
    with pytest.raises(KeyError, match="writes none of the observation keys"):
        WorldModelEnv(wrong_state, **specs).reset()

    class Plain(nn.Module):  # no out_keys to check up front: the step raises
        def forward(self, td):
            return td.set("observation", td["observation"] + 1)

    env = WorldModelEnv(Plain(), **specs)
    with pytest.raises(KeyError, match="wrote no 'reward'"):
        env.rand_step(env.reset())

    class BadShape(nn.Module):
        def forward(self, td):
            td.set("observation", td["observation"] + 1)
            return td.set("reward", td["observation"].sum(-1))

    env = WorldModelEnv(BadShape(), **specs, batch_size=[2])
    with pytest.raises(ValueError, match=r"'reward' has shape \[2\], expected \[2, 1\]"):
        env.rand_step(env.reset())

    class FloatDone(nn.Module):
        def forward(self, td):
            obs = td["observation"] + 1
            td.set("observation", obs)
            td.set("reward", obs.sum(-1, keepdim=True))
            return td.set("terminated", torch.zeros_like(obs[..., :1]))

    env = WorldModelEnv(FloatDone(), **specs)
    with pytest.raises(TypeError, match="'terminated' is torch.float32, expected torch.bool"):
        env.rand_step(env.reset())


def test_model_writing_under_next_is_read():
    transition = TensorDictModule(nn.Linear(OBS, OBS), ["observation"], [("next", "observation")])
    reward = TensorDictModule(nn.Linear(OBS, 1), [("next", "observation")], [("next", "reward")])
    from torchrl.modules import WorldModelWrapper

    env = WorldModelEnv(
        WorldModelWrapper(transition, reward),
        observation_spec=Composite(observation=Unbounded(shape=(OBS,))),
        action_spec=Unbounded(shape=(ACT,)),
        start_states=starts_sampler(),
        batch_size=[4],
    )
    check_env_specs(env, seed=0)
    td = env.rand_step(env.reset())
    with torch.no_grad():
        expected = transition.module(td["observation"])
    torch.testing.assert_close(td["next", "observation"], expected)


def test_missing_specs_and_bad_params_raise():
    env = WorldModelEnv(linear_model(), start_states=starts_sampler())
    with pytest.raises(RuntimeError, match="no action spec.*set_specs_from_env"):
        env.reset()
    env.set_specs_from_env(RealEnv(latent=False))
    assert env.observation_spec["observation"].shape == (OBS,)
    check_env_specs(env, seed=0)
    with pytest.raises(ValueError, match="params has 1 tensors"):
        WorldModelEnv(linear_model(), params=[torch.zeros(1)])
    with pytest.raises(KeyError, match="does not have"):
        WorldModelEnv(linear_model(), params={"weight": torch.zeros(1)})
    with pytest.raises(
        ValueError, match=r"'state' spec has shape \[4\] per sub-env.*built with \[5\]"
    ):
        DreamerEnv(linear_model(), prior_shape=(5,), belief_shape=(6,)).set_specs_from_env(
            RealEnv()
        )
    with pytest.raises(RuntimeError, match="DreamerDecoder has no decoder"):
        TransformedEnv(dreamer_env(), DreamerDecoder())
    with pytest.raises(TypeError, match="replay_buffer must have a sample"):
        ImaginedEnv(linear_model(), object())


def test_model_based_env_base_subclass():
    class Latent(ModelBasedEnvBase):
        def __init__(self, model):
            super().__init__(model, batch_size=[2])
            self.observation_spec = Composite(observation=Unbounded(shape=(2, OBS)), shape=(2,))
            self.action_spec = Unbounded(shape=(2, ACT))

        def sample_start_states(self, batch_size):
            return TensorDict(observation=torch.ones(*batch_size, OBS), batch_size=batch_size)

    env = Latent(linear_model())
    check_env_specs(env, seed=0)
    assert torch.equal(env.reset()["observation"], torch.ones(2, OBS))
