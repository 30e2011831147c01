"""Loss-update cases shared by ``benchmarks/losses.py`` and its TorchRL peer script.

Each case builds the same networks with the given ``modules``/``objectives`` namespaces (ours or
TorchRL's, whose public names agree) and returns a callable that runs one update's loss work on
a fixed batch of 256: forward, sum of the ``loss_*`` terms, backward, and the target update
where the algorithm has one. No optimizer step (it is the same code for both libraries), unless
``make_cases(..., optimizer=True)`` asks for an Adam step before the target update (what
``benchmarks/compile.py`` times, beside ``plain_cases.py``'s updates of the same form).

Every call gets the same batch, as ``plain_cases.py``'s updates do. The losses write into it
(priorities, and TorchRL's distribution parameters and values) as they would into a batch
sampled in a training loop; each call overwrites the previous call's entries and reads none of
them, so each call does the same work. (A case must keep it so: the PPO batch carries its
advantage, which a PPO loss would otherwise compute on the first call and find on the next.)
Until 2026-11-29 each call got a shallow copy, ``td.clone(False)``: 7 us in a tight loop,
20-40 us inside an update, timed for the libraries and not for plain PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BATCH, OBS, ACT, N_ACTIONS, CELLS = 256, 8, 2, 4, 64


def _transitions(torch: Any, TensorDict: Any, action: Any) -> Any:
    # Drawn on the CPU with a seeded generator, then moved to the default device (a case built
    # in a ``with torch.device("cuda")`` block holds the same numbers).
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(BATCH, 1, dtype=torch.bool, device="cpu")
    done[::17] = True
    return TensorDict(
        {
            "observation": torch.randn(BATCH, OBS, generator=g, device="cpu"),
            "action": action.cpu(),
            "next": {
                "observation": torch.randn(BATCH, OBS, generator=g, device="cpu"),
                "reward": torch.randn(BATCH, 1, generator=g, device="cpu"),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[BATCH],
    ).to(torch.get_default_device())


def step_fn(
    torch: Any, loss: Any, td: Any, updater: Any = None, optimizer: bool = False
) -> Callable[[], None]:
    """One update of ``loss`` on ``td``: zero grads, forward, backward, (Adam), target update."""
    trainable = [p for p in loss.parameters() if p.requires_grad]
    adam = torch.optim.Adam(trainable, lr=3e-4) if optimizer else None

    def run() -> None:
        if adam is not None:
            adam.zero_grad(set_to_none=True)
        else:
            for p in trainable:
                p.grad = None
        out = loss(td)
        total = sum(v for k, v in out.items() if k.startswith("loss"))
        total.backward()
        if adam is not None:
            adam.step()
        if updater is not None:
            updater.step()

    return run


def make_losses(modules: Any, objectives: Any) -> dict[str, tuple[Any, Any, Any]]:
    """``{name: (loss module, batch, target updater or None)}`` for DQN, SAC, TD3, clipped PPO.

    Everything is built on the default device: call it in a ``with torch.device("cuda")``
    block for GPU cases.
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn

    torch.manual_seed(0)
    MLP = modules.MLP

    def mlp(n_in: int, n_out: int) -> nn.Module:
        return MLP(in_features=n_in, out_features=n_out, depth=2, num_cells=CELLS)

    cases: dict[str, tuple[Any, Any, Any]] = {}

    # DQN, double DQN, one-hot actions.
    qnet = modules.QValueActor(mlp(OBS, N_ACTIONS), action_space="one_hot")
    action = nn.functional.one_hot(torch.randint(N_ACTIONS, (BATCH,)), N_ACTIONS)
    loss = objectives.DQNLoss(qnet, delay_value=True, double_dqn=True, action_space="one_hot")
    loss.make_value_estimator(gamma=0.99)
    cases["dqn_update"] = (
        loss,
        _transitions(torch, TensorDict, action),
        objectives.SoftUpdate(loss, eps=0.99),
    )

    # SAC v2 with two critics, TanhNormal policy.
    def actor() -> Any:
        net = TensorDictModule(
            nn.Sequential(mlp(OBS, 2 * ACT), NormalParamExtractor()),
            ["observation"],
            ["loc", "scale"],
        )
        return modules.ProbabilisticActor(
            net, in_keys=["loc", "scale"], distribution_class=modules.TanhNormal
        )

    def qvalue() -> Any:
        return modules.ValueOperator(mlp(OBS + ACT, 1), in_keys=["observation", "action"])

    continuous = _transitions(torch, TensorDict, torch.rand(BATCH, ACT) * 1.8 - 0.9)
    loss = objectives.SACLoss(actor(), qvalue(), num_qvalue_nets=2, target_entropy=-float(ACT))
    loss.make_value_estimator(gamma=0.99)
    cases["sac_update"] = (loss, continuous, objectives.SoftUpdate(loss, eps=0.995))

    # TD3 with two critics and target-policy smoothing.
    policy = modules.Actor(mlp(OBS, ACT))
    loss = objectives.TD3Loss(policy, qvalue(), bounds=(-1.0, 1.0), num_qvalue_nets=2)
    loss.make_value_estimator(gamma=0.99)
    cases["td3_update"] = (loss, continuous, objectives.SoftUpdate(loss, eps=0.995))

    # Clipped PPO on a minibatch that already carries its advantage and value target.
    ppo_data = continuous.clone()
    ppo_data["sample_log_prob"] = torch.randn(BATCH) * 0.1 - 1.0
    ppo_data["advantage"] = torch.randn(BATCH, 1)
    ppo_data["value_target"] = torch.randn(BATCH, 1)
    critic = modules.ValueOperator(mlp(OBS, 1))
    loss = objectives.ClipPPOLoss(actor(), critic, entropy_coeff=0.01, critic_coeff=0.5)
    # TorchRL 0.14 reads "action_log_prob" by default; both read the same key here.
    loss.set_keys(sample_log_prob="sample_log_prob")
    cases["ppo_minibatch_update"] = (loss, ppo_data, None)
    return cases


def make_cases(
    modules: Any, objectives: Any, optimizer: bool = False
) -> dict[str, Callable[[], None]]:
    """``{name: step}`` for DQN, SAC, TD3 and clipped PPO (with an Adam step if ``optimizer``)."""
    import torch

    return {
        name: step_fn(torch, loss, td, updater, optimizer)
        for name, (loss, td, updater) in make_losses(modules, objectives).items()
    }
