"""``torchrl.trainers.mixed_precision.MixedPrecisionOptimizationStepper``."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from torchrl.modules import MLP, QValueActor
from torchrl.objectives import DQNLoss
from torchrl.trainers import Trainer
from torchrl.trainers.learners import Learner
from torchrl.trainers.mixed_precision import MixedPrecisionOptimizationStepper


class Regression(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3, 1))

    def forward(self, td: TensorDict) -> TensorDict:
        return TensorDict(loss=((td["x"] @ self.w - td["y"]) ** 2).mean())


def _data(n: int = 8, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return TensorDict(x=x, y=x.sum(-1, keepdim=True), batch_size=[n])


def _dqn_batch(n: int = 16) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, 4),
            "action": nn.functional.one_hot(torch.arange(n) % 2, 2),
            "next": {
                "observation": torch.randn(n, 4),
                "reward": torch.randn(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def test_accumulation_equals_one_step_on_the_concatenated_batch() -> None:
    data = _data(8)
    loss = Regression()
    reference = copy.deepcopy(loss)
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.SGD(loss.parameters(), lr=0.1), gradient_accumulation_steps=2, clip_norm=None
    )
    out1 = stepper(loss(data[:4]))
    assert "grad_norm" not in out1 and not stepper.last_step_applied
    out2 = stepper(loss(data[4:]))
    assert stepper.last_step_applied and (stepper.micro_steps, stepper.optimizer_steps) == (2, 1)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(data)["loss"].backward()
    grad_norm = reference.w.grad.norm()
    opt.step()
    torch.testing.assert_close(loss.w, reference.w)
    torch.testing.assert_close(out2["grad_norm"], grad_norm)
    assert loss.w.grad is None  # zeroed after the step


def test_clipping_bounds_the_update() -> None:
    loss = Regression()
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.SGD(loss.parameters(), lr=1.0), clip_norm=0.5
    )
    out = stepper(loss(_data()))
    assert out["grad_norm"].item() > 0.5  # the norm reported is the one before clipping
    assert loss.w.detach().norm().item() == pytest.approx(0.5, rel=1e-5)


def test_bfloat16_runs_the_loss_networks_under_autocast_in_a_learner() -> None:
    torch.manual_seed(0)
    dqn = DQNLoss(
        QValueActor(MLP(in_features=4, out_features=2, num_cells=[8]), action_space="one_hot")
    )
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.Adam(dqn.parameters(), lr=1e-3), mixed_precision=True
    )
    assert not stepper.scaler.is_enabled()  # bfloat16 needs no scaler
    learner = Learner(dqn, optimization_stepper=stepper).initialize()
    before = [p.detach().clone() for p in dqn.parameters()]
    batch = _dqn_batch()
    metrics = learner.optimize(batch)
    assert dqn.autocast_dtype == torch.bfloat16  # set once, through the loss's set_autocast
    assert metrics["loss"].dtype == torch.float32 and torch.isfinite(metrics["grad_norm"])
    assert learner.model_version == 1
    assert any(not torch.equal(b, p) for b, p in zip(before, dqn.parameters()))
    assert stepper.optimizer_steps == 1
    assert "optimization_stepper" in learner.state_dict()["modules"]


def test_float16_uses_a_grad_scaler_and_skips_overflowing_steps() -> None:
    w = nn.Parameter(torch.ones(2))
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.SGD([w], lr=0.1),
        mixed_precision=True,
        autocast_dtype=torch.float16,
        device_type="cpu",
        clip_norm=None,
    )
    assert stepper.scaler.is_enabled()
    stepper(TensorDict(loss=(w * torch.tensor([float("inf"), 1.0])).sum()))
    assert (stepper.optimizer_steps, stepper.skipped_steps) == (0, 1)
    assert w.tolist() == [1.0, 1.0]
    stepper(TensorDict(loss=(w**2).sum()))
    assert stepper.optimizer_steps == 1
    torch.testing.assert_close(w.detach(), torch.full((2,), 0.8))
    state = stepper.state_dict()
    assert state["scaler"] and state["optimizer_steps"] == 1
    restored = MixedPrecisionOptimizationStepper(
        torch.optim.SGD([w], lr=0.1), mixed_precision=True, autocast_dtype=torch.float16
    )
    restored.load_state_dict(state)
    assert restored.scaler.get_scale() == stepper.scaler.get_scale()
    assert (restored.optimizer_steps, restored.skipped_steps) == (1, 1)


def test_plain_module_runs_whole_under_torch_autocast() -> None:
    seen = {}

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, td):
            out = self.lin(td["x"])
            seen["dtype"] = out.dtype
            return TensorDict(loss=out.float().pow(2).mean())

    probe = Probe()
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.SGD(probe.parameters(), lr=0.1), mixed_precision=True
    )
    Learner(probe, optimization_stepper=stepper).initialize().optimize(_data())
    assert seen["dtype"] == torch.bfloat16


def test_in_a_trainer() -> None:
    loss = Regression()
    batches = [_data(8, seed=i) for i in range(4)]
    trainer = Trainer(
        collector=batches,
        total_frames=32,
        optim_steps_per_batch=2,
        loss_module=loss,
        progress_bar=False,
    )
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.SGD(loss.parameters(), lr=0.05), gradient_accumulation_steps=2
    )
    stepper.register(trainer)
    assert trainer.ops("optimizer") == [stepper]
    trainer.train()
    assert stepper.micro_steps == 8 and stepper.optimizer_steps == 4
    assert "optimization_stepper" in trainer.state_dict()["modules"]
    assert loss.w.abs().sum() > 0


def test_errors() -> None:
    w = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.1)
    with pytest.raises(TypeError, match="must be a torch optimizer"):
        MixedPrecisionOptimizationStepper(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="autocast_dtype must be"):
        MixedPrecisionOptimizationStepper(opt, autocast_dtype=torch.float32)
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be an int >= 1"):
        MixedPrecisionOptimizationStepper(opt, gradient_accumulation_steps=0)
    with pytest.raises(ValueError, match="clip_norm must be > 0"):
        MixedPrecisionOptimizationStepper(opt, clip_norm=0.0)
    stepper = MixedPrecisionOptimizationStepper(opt)
    with pytest.raises(KeyError, match="no entry starting with 'loss'"):
        stepper(TensorDict(value=w.sum()))
    with pytest.raises(ValueError, match="must be a scalar"):
        stepper(TensorDict(loss=w.expand(2) * 1.0))
    with pytest.raises(KeyError, match=r"loss components \['loss_b'\]"):
        MixedPrecisionOptimizationStepper(opt, loss_components=["loss_b"])(
            TensorDict(loss_a=w.sum())
        )
    loss = Regression()
    trainer = Trainer(
        collector=[],
        total_frames=1,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        progress_bar=False,
    )
    with pytest.raises(ValueError, match="already has an 'optimizer' op"):
        MixedPrecisionOptimizationStepper(torch.optim.SGD(loss.parameters(), lr=0.1)).register(
            trainer
        )
    plain = Trainer(
        collector=[], total_frames=1, optim_steps_per_batch=1, loss_module=loss, progress_bar=False
    )
    with pytest.raises(ValueError, match="needs a loss with set_autocast"):
        MixedPrecisionOptimizationStepper(
            torch.optim.SGD(loss.parameters(), lr=0.1), mixed_precision=True
        ).register(plain)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_float16_on_cuda() -> None:
    torch.manual_seed(0)
    net = MLP(in_features=4, out_features=2, num_cells=[64]).cuda()
    dqn = DQNLoss(QValueActor(net, action_space="one_hot"))
    stepper = MixedPrecisionOptimizationStepper(
        torch.optim.Adam(dqn.parameters(), lr=1e-3),
        mixed_precision=True,
        autocast_dtype=torch.float16,
    )
    assert stepper.device_type == "cuda" and stepper.scaler.is_enabled()
    learner = Learner(dqn, optimization_stepper=stepper, models={"policy": net}).initialize()
    for _ in range(5):
        metrics = learner.optimize(_dqn_batch().to("cuda"))
    assert torch.isfinite(metrics["loss"]) and stepper.optimizer_steps + stepper.skipped_steps == 5
