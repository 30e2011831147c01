"""Worker-side helpers of the inference-server tests (importable by name in spawned workers)."""

from __future__ import annotations

import os

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from torchrl.modules.inference_server import InferenceServer, ServerGoneError

OBS_DIM = 4
ACT_DIM = 2


def make_policy(scale: float = 1.0) -> TensorDictModule:
    """action = scale * sum(observation) on every action dim: easy to check anywhere."""
    linear = torch.nn.Linear(OBS_DIM, ACT_DIM)
    with torch.no_grad():
        linear.weight.fill_(scale)
        linear.bias.zero_()
    return TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])


def set_scale(policy: TensorDictModule, scale: float) -> dict:
    return {"module.weight": torch.full((ACT_DIM, OBS_DIM), scale), "module.bias": torch.zeros(2)}


def obs_for(worker: int, step: int, rows: int) -> torch.Tensor:
    # distinct for each worker, step and row; integer-valued so float sums are exact
    base = float(worker * 1000 + step * 10)
    return base + torch.arange(rows * OBS_DIM, dtype=torch.float32).reshape(rows, OBS_DIM) % 7


def expected_action(obs: torch.Tensor, version: torch.Tensor) -> torch.Tensor:
    # weights of version v are filled with v + 1 (see the tests that update them)
    return (obs.sum(-1, keepdim=True) * (version.unsqueeze(-1) + 1).float()).expand(
        *obs.shape[:-1], ACT_DIM
    )


def worker_loop(client, worker: int, steps: int, rows: int, start=None) -> None:
    """Sends ``steps`` requests; exit code 0 if every response is this worker's own."""
    torch.set_num_threads(1)
    if start is not None:
        start.wait(10)
    for step in range(steps):
        obs = obs_for(worker, step, rows)
        out = client(TensorDict(observation=obs, batch_size=[rows]))
        version = out["policy_version"]
        if version.shape != (rows,) or version.dtype != torch.int64:
            os._exit(4)
        if not torch.equal(out["action"], expected_action(obs, version)):
            os._exit(3)
    os._exit(0)


def worker_until_error(client, rows: int) -> None:
    """Sends requests until the client raises; exit code 7 on ServerGoneError."""
    try:
        while True:
            client(TensorDict(observation=torch.zeros(rows, OBS_DIM), batch_size=[rows]))
    except ServerGoneError:
        os._exit(7)
    except BaseException:  # noqa: BLE001
        os._exit(8)


def example(rows: int) -> TensorDict:
    return TensorDict(observation=torch.zeros(rows, OBS_DIM), batch_size=[rows])


def serve_then_hang(transport) -> None:
    """Serves ``transport`` from this process until killed."""
    import time

    server = InferenceServer(make_policy(), transport).start()
    time.sleep(60)
    server.shutdown()


def policy_factory(scale: float = 1.0) -> TensorDictModule:
    """A module-level (picklable) factory for ProcessInferenceServer."""
    return make_policy(scale)


def free_layout_worker(client, worker: int, steps: int) -> None:
    """Sends requests whose batch size changes each step; exit code 0 if all are right."""
    torch.set_num_threads(1)
    for step in range(steps):
        rows = 1 + (step + worker) % 3
        obs = obs_for(worker, step, rows)
        out = client(TensorDict(observation=obs, batch_size=[rows]))
        if not torch.equal(out["action"], expected_action(obs, out["policy_version"])):
            os._exit(3)
    os._exit(0)
