"""The module operations timed by ``benchmarks/modules.py``, written once for both libraries.

``make_cases(modules, data)`` takes ``torchrl.modules`` and ``torchrl.data`` (ours, or TorchRL's
under the peers' python) and returns ``{name: zero-argument callable}``. Only names and
signatures both libraries share are used, so the two sides run the same code. Each callable
runs under ``torch.no_grad()`` except the ``*_backward`` cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_cases(modules: Any, data: Any) -> dict[str, Callable[[], Any]]:
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, set_interaction_type
    from torch import nn

    torch.manual_seed(0)
    cases: dict[str, Callable[[], Any]] = {}

    def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return fn()

        return run

    # Distributions -----------------------------------------------------------------------
    loc, scale = torch.randn(256, 6), torch.rand(256, 6) + 0.1

    def tanh_normal() -> Any:
        dist = modules.TanhNormal(loc, scale, low=-2.0, high=2.0)
        return dist.log_prob(dist.rsample())

    cases["tanh_normal_rsample_log_prob_256x6"] = no_grad(tanh_normal)

    loc_g = loc.clone().requires_grad_()

    def tanh_normal_backward() -> Any:
        dist = modules.TanhNormal(loc_g, scale, low=-2.0, high=2.0)
        dist.log_prob(dist.rsample()).sum().backward()

    cases["tanh_normal_rsample_log_prob_backward_256x6"] = tanh_normal_backward

    logits = torch.randn(256, 10)
    mask = torch.rand(256, 10) > 0.3
    mask[:, 0] = True

    def masked_categorical() -> Any:
        dist = modules.MaskedCategorical(logits=logits, mask=mask)
        return dist.log_prob(dist.sample()), dist.entropy()

    cases["masked_categorical_sample_log_prob_entropy_256x10"] = no_grad(masked_categorical)

    # Actors -------------------------------------------------------------------------------
    obs256 = TensorDict(observation=torch.randn(256, 8), batch_size=[256])
    obs1 = TensorDict(observation=torch.randn(8), batch_size=[])
    spec = data.Bounded(-2.0, 2.0, shape=(3,))
    net = TensorDictModule(
        nn.Sequential(modules.MLP(8, 6, num_cells=[64, 64]), modules.NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    actor = modules.ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=modules.TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        return_log_prob=True,
    )

    def actor_random(td: TensorDict) -> Callable[[], Any]:
        def run() -> Any:
            with set_interaction_type("random"):
                return actor(td.copy())

        return run

    cases["prob_actor_tanh_normal_random_256"] = no_grad(actor_random(obs256))
    cases["prob_actor_tanh_normal_random_1"] = no_grad(actor_random(obs1))

    qnet = modules.MLP(8, 6, num_cells=[64, 64])
    qactor = modules.QValueActor(qnet, in_keys=["observation"], spec=data.OneHot(6))
    cases["qvalue_actor_one_hot_256"] = no_grad(lambda: qactor(obs256.copy()))

    mlp = modules.MLP(8, 4, num_cells=[64, 64])
    x = torch.randn(256, 8)
    cases["mlp_forward_256"] = no_grad(lambda: mlp(x))

    # Exploration ----------------------------------------------------------------------------
    greedy = TensorDict(
        action=torch.nn.functional.one_hot(torch.zeros(256, dtype=torch.long), 6).bool(),
        batch_size=[256],
    )
    egreedy = modules.EGreedyModule(data.OneHot(6), eps_init=0.5)
    cases["egreedy_one_hot_256"] = no_grad(lambda: egreedy(greedy.copy()))
    continuous = TensorDict(action=torch.zeros(256, 3), batch_size=[256])
    gaussian = modules.AdditiveGaussianModule(spec)
    cases["additive_gaussian_256x3"] = no_grad(lambda: gaussian(continuous.copy()))

    # Recurrent ------------------------------------------------------------------------------
    lstm = modules.LSTMModule(8, 32, num_layers=1, in_key="observation", out_key="features")
    step_td = TensorDict(
        observation=torch.randn(32, 8),
        is_init=torch.zeros(32, 1, dtype=torch.bool),
        recurrent_state_h=torch.zeros(32, 1, 32),
        recurrent_state_c=torch.zeros(32, 1, 32),
        batch_size=[32],
    )
    cases["lstm_step_32"] = no_grad(lambda: lstm(step_td.copy()))
    is_init = torch.rand(16, 64, 1) < 0.05
    is_init[:, 0] = True
    seq_td = TensorDict(
        observation=torch.randn(16, 64, 8),
        is_init=is_init,
        recurrent_state_h=torch.zeros(16, 64, 1, 32),
        recurrent_state_c=torch.zeros(16, 64, 1, 32),
        batch_size=[16, 64],
    )

    def lstm_sequence() -> Any:
        with modules.set_recurrent_mode(True):
            return lstm(seq_td.copy())

    cases["lstm_recurrent_16x64_resets"] = no_grad(lstm_sequence)

    # Multi-agent ------------------------------------------------------------------------------
    ma = modules.MultiAgentMLP(
        n_agent_inputs=8,
        n_agent_outputs=4,
        n_agents=4,
        centralized=False,
        share_params=False,
        depth=2,
        num_cells=64,
    )
    ma_x = torch.randn(256, 4, 8)
    cases["multiagent_mlp_independent_256x4"] = no_grad(lambda: ma(ma_x))
    return cases
