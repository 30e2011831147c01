"""Peer side of ``benchmarks/transforms.py``: the same configurations under TorchRL.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Prints one JSON object per measurement.

Usage: ``python torchrl_transforms.py --steps N``
"""

from __future__ import annotations

import argparse
import json
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    steps = parser.parse_args().steps
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    try:
        from tensordict import TensorDict

        import torchrl
        from torchrl.data import Categorical, Composite, Unbounded
        from torchrl.envs import EnvBase
        from torchrl.envs.transforms import (
            CatFrames,
            Compose,
            ObservationNorm,
            RewardSum,
            StepCounter,
            TransformedEnv,
        )
    except Exception as err:  # a peer that does not import is reported, not fatal
        print(json.dumps({"peer": "torchrl", "skipped": repr(err)[:300]}))
        return

    class TrivialEnv(EnvBase):
        def __init__(self, batch_size=()):
            super().__init__(batch_size=torch.Size(batch_size))
            b = self.batch_size
            self.observation_spec = Composite(observation=Unbounded(shape=(*b, 4)), shape=b)
            self.action_spec = Categorical(2, shape=b)
            self._obs = torch.zeros(*b, 4)
            self._flag = torch.zeros(*b, 1, dtype=torch.bool)
            self._reward = torch.zeros(*b, 1)

        def _set_seed(self, seed):
            pass

        def _reset(self, tensordict, **kwargs):
            return TensorDict(
                {"observation": self._obs, "done": self._flag, "terminated": self._flag},
                batch_size=self.batch_size,
            )

        def _step(self, tensordict):
            flag = self._flag
            return TensorDict(
                {
                    "observation": self._obs,
                    "reward": self._reward,
                    "done": flag,
                    "terminated": flag,
                    "truncated": flag,
                },
                batch_size=self.batch_size,
            )

    configs = {
        "bare env": lambda: [],
        "TransformedEnv()": lambda: [],
        "StepCounter": lambda: [StepCounter(max_steps=10**9)],
        "StepCounter+RewardSum": lambda: [StepCounter(max_steps=10**9), RewardSum()],
        "StepCounter+RewardSum+ObservationNorm": lambda: [
            StepCounter(max_steps=10**9),
            RewardSum(),
            ObservationNorm(loc=0.0, scale=2.0, in_keys=["observation"]),
        ],
        "CatFrames(4)": lambda: [CatFrames(4, -1, in_keys=["observation"])],
    }

    def timed(env):
        action = env.action_spec.rand()

        def loop(n):
            td = env.reset()
            for _ in range(n):
                td.set("action", action)
                _, td = env.step_and_maybe_reset(td)

        loop(100)
        best = best_cpu = float("inf")
        for _ in range(3):
            start, start_cpu = time.perf_counter(), time.thread_time()
            loop(steps)
            best = min(best, (time.perf_counter() - start) / steps)
            best_cpu = min(best_cpu, (time.thread_time() - start_cpu) / steps)
        return best * 1e6, best_cpu * 1e6

    for batch in ((), (16,)):
        base_us, base_cpu = timed(TrivialEnv(batch))
        for name, factory in configs.items():
            n = len(factory())
            if name == "bare env":
                us, cpu = base_us, base_cpu
            else:
                try:
                    us, cpu = timed(TransformedEnv(TrivialEnv(batch), Compose(*factory())))
                except Exception as err:
                    print(
                        json.dumps({"peer": "torchrl", "config": name, "failed": repr(err)[:300]})
                    )
                    continue
            record = {
                "library": f"torchrl-{torchrl.__version__}",
                "config": name,
                "batch_size": list(batch),
                "us_per_step": round(us, 2),
                "cpu_us_per_step": round(cpu, 2),
                "added_us_per_step": round(us - base_us, 2),
                "cpu_added_us_per_step": round(cpu - base_cpu, 2),
                "torch_threads": 1,
            }
            if n:
                record["us_per_transform"] = round((us - base_us) / n, 2)
                record["cpu_us_per_transform"] = round((cpu - base_cpu) / n, 2)
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
