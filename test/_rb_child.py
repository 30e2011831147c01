"""Child side of test_rb_persistence.py: dumps buffers, or gets killed in the middle of a write.

The functions run in a forked child (fast) or, from the command line, in a fresh interpreter:
``python _rb_child.py dump DIR`` | ``python _rb_child.py kill MODE DIR`` (MODE: ``append``,
``overwrite`` or ``random``). ``notify(word)`` tells the parent how far the child got.
"""

import sys
import time
from collections.abc import Callable

import torch
from _rb_helpers import (
    all_items,
    fill_for_persistence,
    next_samples,
    persistence_cases,
    transitions,
)


def _print(word: str) -> None:
    print(word, flush=True)


def dump(root: str, notify: Callable[[str], None] = _print) -> None:
    for name, factory in persistence_cases(root).items():
        torch.manual_seed(0)
        rb = factory()
        fill_for_persistence(name, rb)
        rb.dumps(f"{root}/{name}")
        torch.save(
            {
                "items": all_items(rb),
                "sampler": rb.sampler.state_dict(),
                "writer": rb.writer.state_dict(),
                "next": next_samples(rb),
            },
            f"{root}/{name}_expected.pt",
        )
    notify("DONE")


def kill(mode: str, root: str, notify: Callable[[str], None] = _print) -> None:
    from torchrl.data.replay_buffers import LazyMemmapStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.storages import TensorStorage

    if mode == "random":
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(20_000, scratch_dir=root))
        chunk = 2_000
        for k in range(10_000):
            rb.extend(transitions(chunk, start=k * chunk, obs_dim=256))
            notify(f"WROTE {k}")
        return
    size = 30 if mode == "overwrite" else 50
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(size, scratch_dir=root))
    rb.extend(transitions(30))
    rb.extend(transitions(10, start=30))  # overwrite: wraps onto slots 0..9
    original = TensorStorage._write

    def write_half_then_hang(self, index, data, nb):
        leaves = self._write_leaves
        self._write_leaves = leaves[: len(leaves) // 2]
        original(self, index, data, nb)
        self._write_leaves = leaves
        notify("PAUSED")
        time.sleep(120)

    TensorStorage._write = write_half_then_hang
    rb.extend(transitions(5, start=100))


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        kill(sys.argv[2], sys.argv[3])
