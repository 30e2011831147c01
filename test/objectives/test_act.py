"""ACTModel, ACTLoss (L1 over the chunk + beta * KL) and ActionChunkExecutor."""

from __future__ import annotations

import math

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.envs import InitTracker, TransformedEnv
from torchrl.modules.models.act import ACTModel
from torchrl.modules.tensordict_module.action_chunk import ActionChunkExecutor
from torchrl.objectives.act import ACTLoss

TRAIN_KEYS = (["observation", "action_chunk"], ["action_pred", "mu", "log_var"])


def _model(**kwargs) -> ACTModel:
    base = dict(obs_dim=3, action_dim=2, chunk_size=4, latent_dim=5, embed_dim=16, num_heads=2)
    base.update(kwargs)
    return ACTModel(base.pop("obs_dim"), base.pop("action_dim"), base.pop("chunk_size"), **base)


def _data(*batch: int) -> TensorDict:
    return TensorDict(
        observation=torch.randn(*batch, 3),
        action_chunk=torch.randn(*batch, 4, 2),
        batch_size=list(batch),
    )


# ---- ACTModel ------------------------------------------------------------------------------


def test_model_shapes_for_any_batch_and_prior_at_inference():
    model = _model()
    td = _data(2, 3)
    pred, mu, log_var = model(td["observation"], td["action_chunk"])
    assert pred.shape == (2, 3, 4, 2) and mu.shape == log_var.shape == (2, 3, 5)
    pred, mu, log_var = model(td["observation"])
    assert pred.shape == (2, 3, 4, 2)
    assert not mu.any() and not log_var.any()
    single, _, _ = model(torch.randn(3))
    assert single.shape == (4, 2)


def test_model_samples_the_posterior_in_training_only():
    model = _model()
    td = _data(6)
    model.train()
    a, mu_a, _ = model(td["observation"], td["action_chunk"])
    b, mu_b, _ = model(td["observation"], td["action_chunk"])
    torch.testing.assert_close(mu_a, mu_b)
    assert not torch.allclose(a, b)  # z ~ N(mu, sigma): two draws
    model.eval()
    c, mu_c, _ = model(td["observation"], td["action_chunk"])
    torch.testing.assert_close(c, model.decode(td["observation"], mu_c))  # z = mu
    # the latent matters: the prior's z = 0 gives another chunk than the posterior mean
    assert not torch.allclose(c, model(td["observation"])[0])


def test_model_rejects_bad_shapes_and_arguments():
    model = _model()
    with pytest.raises(ValueError, match="obs_dim"):
        model(torch.randn(4, 5))
    with pytest.raises(ValueError, match="chunk_size"):
        model(torch.randn(4, 3), torch.randn(4, 3, 2))
    with pytest.raises(ValueError, match="divide"):
        _model(embed_dim=10, num_heads=4)
    with pytest.raises(ValueError, match="chunk_size"):
        _model(chunk_size=0)


# ---- ACTLoss -------------------------------------------------------------------------------


def test_loss_matches_hand_computation():
    model = _model().eval()  # z = mu: the forward pass is deterministic
    loss = ACTLoss(TensorDictModule(model, *TRAIN_KEYS), kl_weight=2.5)
    td = _data(7)
    out = loss(td)
    pred, mu, log_var = model(td["observation"], td["action_chunk"])
    recon = (pred - td["action_chunk"]).abs().mean()
    kl = (-0.5 * (1 + log_var - mu**2 - log_var.exp())).sum(-1).mean()
    torch.testing.assert_close(out["loss_reconstruction"], recon)
    torch.testing.assert_close(out["loss_kl"], kl)
    torch.testing.assert_close(out["loss_act"], recon + 2.5 * kl)
    assert out["loss_act"].requires_grad
    assert not out["loss_reconstruction"].requires_grad and not out["loss_kl"].requires_grad
    assert "action_pred" not in td.keys()  # the loss does not write into the data


def test_padded_steps_are_left_out_of_the_reconstruction():
    model = _model().eval()
    loss = ACTLoss(TensorDictModule(model, *TRAIN_KEYS), reduction="none")
    td = _data(5)
    pad = torch.zeros(5, 4, dtype=torch.bool)
    pad[:, 2:] = True
    td["action_is_pad"] = pad
    pred = model(td["observation"], td["action_chunk"])[0]
    expected = (pred - td["action_chunk"]).abs().mean(-1)[:, :2].mean(-1)
    torch.testing.assert_close(loss(td)["loss_reconstruction"], expected)
    # an actor that also reads the mask hides the padded targets from its encoder: they do not
    # matter at all
    masked = ACTLoss(
        TensorDictModule(model, ["observation", "action_chunk", "action_is_pad"], TRAIN_KEYS[1])
    )
    before = masked(td)
    td["action_chunk"][:, 2:] += 100.0
    after = masked(td)
    torch.testing.assert_close(after["loss_act"], before["loss_act"])


def test_loss_keys_reductions_and_errors():
    actor = TensorDictModule(_model(), *TRAIN_KEYS)
    loss = ACTLoss(actor, reduction="none").set_keys(action_chunk=("vla_action", "chunk"))
    assert loss.in_keys == ["observation", ("vla_action", "chunk")]
    td = TensorDict(
        observation=torch.randn(2, 3, 3),
        vla_action=TensorDict(chunk=torch.randn(2, 3, 4, 2), batch_size=[2, 3]),
        batch_size=[2, 3],
    )
    out = loss(td)
    assert out["loss_act"].shape == out["loss_kl"].shape == (2, 3)
    assert ACTLoss(actor, reduction="sum")(_data(4))["loss_act"].shape == ()
    with pytest.raises(KeyError, match="chunk"):
        loss(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
    with pytest.raises(ValueError, match="action_chunk"):
        ACTLoss(TensorDictModule(_model(), ["observation"], ["action_pred", "mu", "log_var"]))
    with pytest.raises(ValueError, match="kl_weight"):
        ACTLoss(actor, kl_weight=-1.0)
    with pytest.raises(ValueError, match="reduction"):
        ACTLoss(actor, reduction="max")


def _toy_trajectory(length: int = 32, k: int = 4) -> TensorDict:
    """A deterministic periodic task: the phase is observed, the actions follow a fixed curve."""
    t = torch.arange(length, dtype=torch.float32)
    phase = 2 * math.pi * t / length
    observation = torch.stack([phase.sin(), phase.cos()], -1)
    actions = torch.stack([(2 * phase).sin(), 0.5 * phase.cos()], -1)
    index = (t.long().unsqueeze(-1) + torch.arange(k)) % length  # chunk t: a_t .. a_{t+k-1}
    return TensorDict(observation=observation, action_chunk=actions[index], batch_size=[length])


def test_loss_decreases_and_act_fits_the_chunks_of_a_deterministic_trajectory():
    data = _toy_trajectory()
    model = ACTModel(
        2,
        2,
        4,
        latent_dim=4,
        embed_dim=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    loss = ACTLoss(TensorDictModule(model, *TRAIN_KEYS), kl_weight=1.0)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
    history = []
    for _ in range(200):
        out = loss(data)
        optim.zero_grad()
        out["loss_act"].backward()
        optim.step()
        history.append(out["loss_act"].item())
    assert sum(history[-20:]) / 20 < 0.2 * sum(history[:20]) / 20
    model.eval()
    with torch.no_grad():
        pred = model(data["observation"])[0]  # inference: the prior's z = 0
    error = (pred - data["action_chunk"]).abs().mean().item()
    assert error < 0.05, error  # the actions span [-1, 1]


# ---- ActionChunkExecutor -------------------------------------------------------------------


class _ChunkRecorder(nn.Module):
    """Writes chunks of ``k`` actions ``[0, 1, 0, 1, ...]`` and records who asked, when."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.calls: list[list[float]] = []

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.calls.append(observation.flatten().tolist())
        chunk = torch.arange(self.k) % 2
        return chunk.expand(*observation.shape[:-1], self.k).unsqueeze(-1).clone()


def _executor(k: int, execute_steps: int | None) -> tuple[ActionChunkExecutor, _ChunkRecorder]:
    recorder = _ChunkRecorder(k)
    policy = TensorDictModule(recorder, ["observation"], ["action_chunk"])
    return ActionChunkExecutor(policy, execute_steps), recorder


def test_executor_requeries_every_k_steps_and_at_episode_starts_in_a_rollout():
    env = TransformedEnv(CountingEnv(max_steps=7), InitTracker())
    executor, recorder = _executor(k=4, execute_steps=3)
    rollout = env.rollout(20, executor, break_when_any_done=False)
    # queries at counts 0, 3, 6 of each 7-step episode: every 3 steps, and again at the reset
    # (after one action of the chunk fetched at count 6)
    assert recorder.calls == [[0.0], [3.0], [6.0]] * 2 + [[0.0], [3.0]]
    assert executor.num_queries == 8
    positions = torch.tensor([0, 1, 2, 0, 1, 2, 0] * 3)[:20]
    assert rollout["action"].squeeze(-1).tolist() == (positions % 2).tolist()


def test_executor_refreshes_only_the_sub_envs_that_need_it():
    env = TransformedEnv(CountingEnv(batch_size=[2], max_steps=[4, 6]), InitTracker())
    executor, recorder = _executor(k=3, execute_steps=None)  # the whole chunk: 3 steps
    env.rollout(8, executor, break_when_any_done=False)
    # both at t = 0 and 3; sub-env 0 alone at its reset (t = 4) and at t = 7, sub-env 1 alone at
    # its reset (t = 6)
    assert recorder.calls == [[0.0, 0.0], [3.0, 3.0], [0.0], [0.0], [3.0]]


def test_executor_reset_and_errors():
    executor, recorder = _executor(k=3, execute_steps=2)
    td = TensorDict(observation=torch.zeros(1), batch_size=[])
    executor(td.clone())
    executor.reset()
    executor(td.clone())
    assert executor.num_queries == 2 and len(recorder.calls) == 2
    assert executor.in_keys == ["observation", "is_init"] and executor.out_keys == ["action"]
    too_long, _ = _executor(k=3, execute_steps=4)
    with pytest.raises(ValueError, match="execute_steps=4"):
        too_long(td.clone())
    with pytest.raises(ValueError, match="execute_steps"):
        _executor(k=3, execute_steps=0)
    flat = ActionChunkExecutor(TensorDictModule(lambda o: o, ["observation"], ["action_chunk"]))
    with pytest.raises(ValueError, match="step dim"):
        flat(TensorDict(observation=torch.zeros(4), batch_size=[4]))
