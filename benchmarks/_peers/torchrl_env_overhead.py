"""Peer side of ``benchmarks/env_step_overhead.py``: the same trivial env under TorchRL.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Prints one JSON object per measurement.

Usage: ``python torchrl_env_overhead.py --steps N``
"""

from __future__ import annotations

import argparse
import json
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    steps = parser.parse_args().steps
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    try:
        from tensordict import TensorDict

        import torchrl
        from torchrl.data import Categorical, Composite, Unbounded
        from torchrl.envs import EnvBase
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

    for batch in ((), (16,)):
        env = TrivialEnv(batch)
        for name, kwargs in (
            ("rollout(break_when_any_done=True)", {}),
            ("rollout(break_when_any_done=False)", {"break_when_any_done": False}),
        ):
            env.rollout(10, **kwargs)
            best = best_cpu = float("inf")
            for _ in range(3):
                start, start_cpu = time.perf_counter(), time.thread_time()
                env.rollout(steps, **kwargs)
                best = min(best, (time.perf_counter() - start) / steps)
                best_cpu = min(best_cpu, (time.thread_time() - start_cpu) / steps)
            print(
                json.dumps(
                    {
                        "peer": f"torchrl-{torchrl.__version__}",
                        "measure": name,
                        "env": "TrivialEnv",
                        "batch_size": list(batch),
                        "us_per_step": round(best * 1e6, 2),
                        "steps_per_s": round(1 / best),
                        "cpu_us_per_step": round(best_cpu * 1e6, 2),
                        "torch_threads": 1,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
