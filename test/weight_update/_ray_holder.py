"""A Ray actor holding a model and a receiver-side scheme (importable by Ray's workers)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchrl.weight_update.weights import named_weights


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    model[1].running_mean.normal_()  # a buffer that must travel too
    return model


def train_step(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model[1].running_mean.add_(1.0)


class Holder:
    def __init__(self, scheme: Any, seed: int) -> None:
        torch.set_num_threads(1)
        self.model = net(seed)
        self.scheme = scheme
        scheme.init_on_receiver(self.model)

    def update_weights(self, weights: Any, version: int) -> Any:
        return self.scheme.receive(weights=weights, version=version)

    def state(self) -> tuple[int, dict[str, torch.Tensor]]:
        weights = {k: v.detach().clone() for k, v in named_weights(self.model).items()}
        return self.scheme.version, weights


def holder_class(ray: Any) -> Any:
    import sys

    import ray.cloudpickle

    # shipped by value: a Ray instance started by another conftest may not have this folder
    # on its workers' path
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray.remote(num_cpus=0)(Holder)
