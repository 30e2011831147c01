"""PPO on CartPole from the components (the landing page's example)."""

import torch
from tensordict.nn import TensorDictModule as Mod
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

torch.manual_seed(0), torch.set_num_threads(1)  # tiny networks: one thread is fastest
env = TransformedEnv(GymEnv("CartPole-v1", num_envs=8), RewardSum())
net = MLP(4, 2, num_cells=[64, 64], activation_class=nn.Tanh)
actor = ProbabilisticActor(
    Mod(net, in_keys=["observation"], out_keys=["logits"]), in_keys=["logits"],
    distribution_class=OneHotCategorical, spec=env.action_spec, return_log_prob=True,
)  # fmt: skip
critic = ValueOperator(MLP(4, 1, num_cells=[64, 64], activation_class=nn.Tanh), ["observation"])
loss_fn = ClipPPOLoss(actor, critic, entropy_bonus=False, normalize_advantage=True)
gae = GAE(gamma=0.98, lmbda=0.8, value_network=critic)
optim = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)
collector = SyncDataCollector(env, actor, frames_per_batch=256, total_frames=15_360)
for batch in collector:  # batch size [8 envs, 32 steps]
    with torch.no_grad():
        gae(batch)  # writes "advantage" and "value_target"
    data = batch.reshape(-1)
    for _ in range(10):  # epochs of 2 minibatches
        for idx in torch.randperm(data.numel()).split(128):
            losses = loss_fn(data[idx])
            optim.zero_grad()
            (losses["loss_objective"] + losses["loss_critic"]).backward()
            optim.step()
    returns = batch["next", "episode_reward"][batch["next", "done"]]
    if returns.numel():
        print(f"{len(returns)} episodes ended, mean return {returns.mean():.1f}")
