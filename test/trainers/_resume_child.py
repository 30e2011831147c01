"""Child process of the kill-and-resume test: trains, checkpoints, and reports as JSON lines.

Usage: ``python _resume_child.py CKPT TOTAL_FRAMES [--resume] [--memmap]`` (``--memmap``: a
``LazyMemmapStorage`` buffer checkpointed as a dumped directory beside the file).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

torch.set_num_threads(1)

from _trainer_helpers import GlobalCounterEnv, TinyLoss, make_policy  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.data import (  # noqa: E402
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorDictReplayBuffer,
)
from torchrl.trainers import ReplayBufferTrainer, Trainer  # noqa: E402

FRAMES_PER_BATCH = 8


def emit(**values) -> None:
    print(json.dumps(values), flush=True)


def buffer_observations(rb) -> list[int]:
    if len(rb) == 0:
        return []
    return sorted(int(x) for x in rb[: len(rb)]["observation"].reshape(-1).tolist())


def main() -> None:
    ckpt, total = sys.argv[1], int(sys.argv[2])
    resume = "--resume" in sys.argv
    torch.manual_seed(0)
    collector = SyncDataCollector(
        GlobalCounterEnv(), make_policy(), frames_per_batch=FRAMES_PER_BATCH, total_frames=total
    )
    loss = TinyLoss()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    trainer = Trainer(
        collector=collector,
        total_frames=total,
        optim_steps_per_batch=3,
        loss_module=loss,
        optimizer=optim,
        progress_bar=False,
        save_trainer_interval=2 * FRAMES_PER_BATCH,
        save_trainer_file=ckpt,
    )
    memmap = "--memmap" in sys.argv
    storage = LazyMemmapStorage(10_000) if memmap else LazyTensorStorage(10_000)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=4)
    ReplayBufferTrainer(rb, memmap=memmap).register(trainer)
    trainer.register_op("post_optim", loss.update_target)

    def report() -> None:
        emit(event="iter", frames=trainer.collected_frames)
        if not resume:
            time.sleep(0.02)  # leaves the parent time to kill us between two checkpoints

    trainer.register_op("post_steps", report)

    def adam_step() -> int:
        state = optim.state[loss.value.weight]
        return int(state["step"]) if "step" in state else 0

    if resume:
        trainer.load_from_file(ckpt)
        emit(
            event="loaded",
            frames=trainer.collected_frames,
            optim_count=trainer.optim_count,
            adam_step=adam_step(),
            buffer=buffer_observations(rb),
            target=loss.target_value.weight.item(),
            collector_frames=collector.frames,
        )
    trainer.train()
    emit(
        event="done",
        frames=trainer.collected_frames,
        optim_count=trainer.optim_count,
        adam_step=adam_step(),
        buffer=buffer_observations(rb),
    )


if __name__ == "__main__":
    main()
