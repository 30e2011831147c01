"""Trainer overhead: our ``Trainer`` vs a hand-written loop vs TorchRL's ``Trainer``, and checkpoints.

Case: ``--batches`` in-memory batches of ``--frames`` transitions (4-dim observation), each
extended into a replay buffer, then ``--optim-steps`` steps of Adam on a 2x64 MLP regression
loss with samples of ``--sample`` items. The hand-written loop does the same work with the same
components and no hooks; TorchRL's Trainer runs under the peers venv
(``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``; skipped with a note when
absent). Torch runs on 1 thread (``torch.set_num_threads(1)``). Also measures
``save_trainer`` / ``load_from_file`` with a buffer of ``--ckpt-items`` transitions.
One JSON object per line. Usage: ``python benchmarks/trainer_overhead.py [--no-peers]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

import torch
from tensordict import TensorDict

from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.trainers import ReplayBufferTrainer, Trainer

torch.set_num_threads(1)


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

    def forward(self, td: TensorDict) -> TensorDict:
        pred = self.net(td["observation"])
        return TensorDict(loss_value=((pred - td["next", "reward"]) ** 2).mean())


def make_batches(n: int, frames: int) -> list[TensorDict]:
    torch.manual_seed(0)
    return [
        TensorDict(
            {"observation": torch.randn(frames, 4), ("next", "reward"): torch.randn(frames, 1)},
            batch_size=[frames],
        )
        for _ in range(n)
    ]


class ListCollector:
    def __init__(self, batches: list[TensorDict]) -> None:
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


def hand_loop(batches: list[TensorDict], optim_steps: int, sample: int) -> float:
    loss = Loss()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(sum(b.numel() for b in batches)))
    start = time.perf_counter()
    for batch in batches:
        rb.extend(batch)
        for _ in range(optim_steps):
            out = loss(rb.sample(sample))
            optim.zero_grad(set_to_none=True)
            out["loss_value"].backward()
            optim.step()
    return time.perf_counter() - start


def ours(batches: list[TensorDict], optim_steps: int, sample: int) -> float:
    loss = Loss()
    frames = sum(b.numel() for b in batches)
    trainer = Trainer(
        collector=ListCollector(batches),
        total_frames=frames,
        optim_steps_per_batch=optim_steps,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        progress_bar=False,
    )
    ReplayBufferTrainer(TensorDictReplayBuffer(storage=LazyTensorStorage(frames)), sample).register(
        trainer
    )
    start = time.perf_counter()
    trainer.train()
    return time.perf_counter() - start


def checkpoint_times(items: int) -> dict[str, float]:
    loss = Loss()
    batches = make_batches(1, items)
    trainer = Trainer(
        collector=ListCollector(batches),
        total_frames=items,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        progress_bar=False,
    )
    ReplayBufferTrainer(TensorDictReplayBuffer(storage=LazyTensorStorage(items)), 64).register(
        trainer
    )
    trainer.train()
    with tempfile.TemporaryDirectory() as tmp:
        trainer.save_trainer_file = os.path.join(tmp, "ckpt.pt")  # type: ignore[assignment]
        start = time.perf_counter()
        trainer.save_trainer(force_save=True)
        save_s = time.perf_counter() - start
        size = os.path.getsize(os.path.join(tmp, "ckpt.pt"))
        start = time.perf_counter()
        trainer.load_from_file(os.path.join(tmp, "ckpt.pt"))
        load_s = time.perf_counter() - start
    return {"save_s": save_s, "load_s": load_s, "file_mb": size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--optim-steps", type=int, default=10)
    parser.add_argument("--sample", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ckpt-items", type=int, default=100_000)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    batches = make_batches(args.batches, args.frames)
    steps = args.batches * args.optim_steps
    common = {"threads": 1, "batches": args.batches, "optim_steps": steps, "sample": args.sample}
    ours(batches[:5], 2, args.sample)  # warm-up
    best = {}
    for name, fn in (("hand_loop", hand_loop), ("trainer", ours)):
        times = [fn(batches, args.optim_steps, args.sample) for _ in range(args.repeats)]
        best[name] = min(times)
        print(
            json.dumps(
                {
                    "case": name,
                    **common,
                    "seconds": best[name],
                    "us_per_optim_step": 1e6 * best[name] / steps,
                }
            )
        )
    print(
        json.dumps(
            {"case": "trainer_overhead_vs_hand_loop", "ratio": best["trainer"] / best["hand_loop"]}
        )
    )
    print(
        json.dumps(
            {"case": "checkpoint", "items": args.ckpt_items, **checkpoint_times(args.ckpt_items)}
        )
    )
    if args.no_peers:
        return
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not os.path.exists(python):
        print(json.dumps({"case": "torchrl_trainer", "skipped": f"no peers python at {python}"}))
        return
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_peers", "trainer_peers.py")
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run(
            [
                python,
                script,
                str(args.batches),
                str(args.frames),
                str(args.optim_steps),
                str(args.sample),
            ],
            capture_output=True,
            text=True,
            cwd=tempfile.gettempdir(),
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if not lines:
            print(json.dumps({"case": "torchrl_trainer", "skipped": out.stderr[-500:]}))
            return
        runs.append(json.loads(lines[-1]))
    if "skipped" in runs[0]:
        print(json.dumps(runs[0]))
        return
    peer = min(runs, key=lambda r: r["seconds"])
    print(json.dumps({**peer, **common}))
    print(
        json.dumps(
            {"case": "ours_vs_torchrl_trainer", "speedup": peer["seconds"] / best["trainer"]}
        )
    )


if __name__ == "__main__":
    main()
