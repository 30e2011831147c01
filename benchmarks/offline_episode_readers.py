"""Conversion, reopen and sampling speed of the episode-file readers on synthetic data.

Writes ``--episodes`` episodes of ``--length`` steps in the Gen-DGRL (npz, 3x64x64 uint8 frames)
and V-D4RL (DrQ npz, 3x64x64 frames) layouts into a temporary folder, converts each with its
reader, reopens the copy and samples batches of 256. Prints one JSON object per reader.

    python benchmarks/offline_episode_readers.py --episodes 40 --length 500
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchrl.data.datasets.gen_dgrl import GenDGRLExperienceReplay
from torchrl.data.datasets.vd4rl import VD4RLExperienceReplay


def write_gen_dgrl(folder: Path, episodes: int, length: int, rng: np.random.Generator) -> None:
    folder.mkdir(parents=True)
    for e in range(episodes):
        dones = np.zeros(length, bool)
        dones[-1] = True
        np.savez(
            folder / f"20240101T000000_{e}_{length}_{e}_1.00.npz",
            observations=rng.integers(0, 255, (length + 1, 3, 64, 64), dtype=np.uint8),
            actions=rng.integers(0, 15, (length, 1)),
            rewards=rng.random((length, 1)),
            dones=dones,
        )


def write_vd4rl(folder: Path, episodes: int, length: int, rng: np.random.Generator) -> None:
    folder.mkdir(parents=True)
    for e in range(episodes):
        rows = length + 1
        np.savez(
            folder / f"20220101T000000_{e}_{length}.npz",
            observation=rng.integers(0, 255, (rows, 3, 64, 64), dtype=np.uint8),
            action=rng.random((rows, 6), dtype=np.float32),
            reward=rng.random(rows, dtype=np.float32),
            discount=np.ones(rows, np.float32),
        )


def measure(name: str, build, batches: int) -> dict:
    start = time.perf_counter()
    data = build()
    convert = time.perf_counter() - start
    start = time.perf_counter()
    data = build()
    reopen = time.perf_counter() - start
    data.sample()
    start = time.perf_counter()
    for _ in range(batches):
        data.sample()
    per_s = batches * 256 / (time.perf_counter() - start)
    return {
        "reader": name,
        "transitions": len(data),
        "convert_s": round(convert, 2),
        "reopen_s": round(reopen, 3),
        "sampled_transitions_per_s": round(per_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--batches", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_gen_dgrl(root / "g" / "raw" / "bigfish-1M_E", args.episodes, args.length, rng)
        write_vd4rl(
            root / "v" / "raw" / "vd4rl" / "main/walker_walk/random/64px",
            args.episodes,
            args.length,
            rng,
        )
        results = [
            measure(
                "GenDGRLExperienceReplay",
                lambda: GenDGRLExperienceReplay("bigfish-1M_E", 256, root=root / "g"),
                args.batches,
            ),
            measure(
                "VD4RLExperienceReplay (float pixels)",
                lambda: VD4RLExperienceReplay("main/walker_walk/random/64px", 256, root=root / "v"),
                args.batches,
            ),
            measure(
                "VD4RLExperienceReplay (uint8 pixels, totensor=False)",
                lambda: VD4RLExperienceReplay(
                    "main/walker_walk/random/64px",
                    256,
                    root=root / "v_uint8",
                    data_dir=root / "v" / "raw" / "vd4rl" / "main/walker_walk/random/64px",
                    totensor=False,
                ),
                args.batches,
            ),
        ]
    for result in results:
        print(json.dumps({**result, "episodes": args.episodes, "length": args.length}))


if __name__ == "__main__":
    main()
