"""TorchRL's Trainer on the case of ``benchmarks/trainer_overhead.py`` (run under the peers venv).

Prints one JSON object. Usage: ``python trainer_peers.py BATCHES FRAMES OPTIM_STEPS SAMPLE``.
"""

from __future__ import annotations

import json
import sys
import time

import torch

torch.set_num_threads(1)


def main() -> None:
    n_batches, frames, optim_steps, sample = (int(x) for x in sys.argv[1:5])
    from tensordict import TensorDict

    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.trainers import ReplayBufferTrainer, Trainer

    class Loss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(4, 64),
                torch.nn.Tanh(),
                torch.nn.Linear(64, 64),
                torch.nn.Tanh(),
                torch.nn.Linear(64, 1),
            )

        def forward(self, td):
            return TensorDict(
                loss_value=((self.net(td["observation"]) - td["next", "reward"]) ** 2).mean()
            )

    torch.manual_seed(0)
    batches = [
        TensorDict(
            {"observation": torch.randn(frames, 4), ("next", "reward"): torch.randn(frames, 1)},
            batch_size=[frames],
        )
        for _ in range(n_batches)
    ]

    class Collector:
        init_random_frames = 0

        def __iter__(self):
            return iter(batches)

        def shutdown(self):
            pass

        def update_policy_weights_(self):
            pass

    loss = Loss()
    try:
        trainer = Trainer(
            collector=Collector(),
            total_frames=n_batches * frames,
            frame_skip=1,
            optim_steps_per_batch=optim_steps,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
            progress_bar=False,
            save_trainer_interval=10**12,
            log_interval=10**12,
        )
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n_batches * frames))
        ReplayBufferTrainer(rb, batch_size=sample).register(trainer)
        start = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - start
    except Exception as err:  # noqa: BLE001 (reported, not hidden)
        print(json.dumps({"case": "torchrl_trainer", "skipped": f"{type(err).__name__}: {err}"}))
        return
    steps = n_batches * optim_steps
    print(
        json.dumps(
            {
                "case": "torchrl_trainer",
                "seconds": elapsed,
                "us_per_optim_step": 1e6 * elapsed / steps,
            }
        )
    )


if __name__ == "__main__":
    main()
