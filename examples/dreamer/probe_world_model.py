"""Diagnostics of the Dreamer world model alone: is the latent as predictive from pixels as from states?

Collects uniform-random episodes of Pendulum-v1 (``train_episodes`` to train on,
``test_episodes`` held out, each step keeping the env's true ``(cos, sin, theta dot)``),
trains only the world model of ``dreamer.py`` on them and, every ``every`` updates, prints one
JSON line with:

- the model's loss terms on the held-out episodes;
- ``probe_r2``: R^2 on the held-out episodes of a ridge regression from the posterior
  ``(state, belief)`` to ``(cos, sin, theta dot)`` fitted on the training episodes (the first
  5 steps of each episode, where the filter has seen too few frames, are left out);
- ``reward_posterior_mae``: mean absolute error of the reward head on the posterior states,
  beside ``reward_std``, the spread of the true rewards;
- ``reward_open_loop_mae``: the same after 1, 5, 10 and 15 steps of the prior alone, run on
  the episode's real actions from posterior states (what imagination feeds the actor).

Every ``dreamer.py`` flag is accepted (``--pixels true``, ``--action-repeat 4``...), plus
``--updates``, ``--every``, ``--train-episodes`` and ``--test-episodes``.

Usage: ``python examples/dreamer/probe_world_model.py --pixels true --updates 800 --every 400``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from tensordict import TensorDictBase

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dreamer  # noqa: E402

HORIZONS = (1, 5, 10, 15)
SKIP = 5  # first steps of each episode left out of the probe and the errors


def collect(env, cfg: dreamer.Config, episodes: int) -> TensorDictBase:
    """``[episodes, T]`` random-action transitions, with the true state at ``("next", "true_obs")``."""
    out = []
    for _ in range(episodes):
        td = env.reset()
        steps = []
        while True:
            action = torch.rand(1) * 2 - 1
            td.set("action", action)
            nxt = env.step(td).get("next")
            step = dreamer.stored_step(action, nxt, cfg)
            steps.append(dreamer.to_storage(step, cfg))
            step.set(("next", "true_obs"), nxt.get("observation"))
            if bool(nxt.get("done").any()):
                break
            td = nxt.exclude("reward", "done", "terminated", "truncated")
        out.append(torch.stack(steps))
    return torch.stack(out)


@torch.no_grad()
def filtered(agent: dreamer.Agent, episodes: TensorDictBase) -> tuple[TensorDictBase, dict]:
    """The world model run over whole episodes: ``(outputs, loss terms)``."""
    cfg = agent.cfg
    data = episodes.exclude(("next", "true_obs")).clone()
    key = ("next", cfg.obs_key)
    if cfg.pixels:
        data.set(key, data.get(key).float() / 255)
    data.set("state", torch.zeros(*data.batch_size, cfg.latent_dim))
    data.set("belief", torch.zeros(*data.batch_size, cfg.belief_dim))
    losses, out = agent.model_loss(data)
    return out, {k: round(float(v), 3) for k, v in losses.items()}


@torch.no_grad()
def report(agent: dreamer.Agent, reward_net, train: TensorDictBase, test: TensorDictBase) -> dict:
    """The JSON fields described in the module docstring."""
    out_train, _ = filtered(agent, train)
    out_test, losses = filtered(agent, test)

    def features(out: TensorDictBase) -> torch.Tensor:
        x = torch.cat([out["next", "state"], out["next", "belief"]], -1)[:, SKIP:]
        x = x.reshape(-1, x.shape[-1])
        return torch.cat([x, torch.ones(len(x), 1)], -1)

    x_train, x_test = features(out_train), features(out_test)
    y_train = train["next", "true_obs"][:, SKIP:].reshape(-1, 3)
    y_test = test["next", "true_obs"][:, SKIP:].reshape(-1, 3)
    ridge = 1e-2 * torch.eye(x_train.shape[-1])
    weights = torch.linalg.solve(x_train.T @ x_train + ridge, x_train.T @ y_train)
    r2 = 1 - ((x_test @ weights - y_test) ** 2).mean(0) / y_test.var(0)
    true_reward = test["next", "reward"]
    posterior_err = (out_test["next", "reward"] - true_reward)[:, SKIP:].abs().mean()
    errors, starts = torch.zeros(max(HORIZONS)), 0
    actions, length = test["action"], test.shape[1]
    for t0 in range(SKIP, length - max(HORIZONS) - 1, 7):
        state, belief = out_test["next", "state"][:, t0], out_test["next", "belief"][:, t0]
        for k in range(max(HORIZONS)):
            state, belief = agent.prior_step(state, belief, actions[:, t0 + 1 + k])
            reward = reward_net(state, belief)[-1]
            errors[k] += (reward - true_reward[:, t0 + 1 + k]).abs().mean()
        starts += 1
    return {
        **losses,
        "probe_r2": [round(float(v), 3) for v in r2],
        "reward_posterior_mae": round(float(posterior_err), 3),
        "reward_std": round(float(true_reward.std()), 3),
        "reward_open_loop_mae": [round(float(errors[h - 1] / max(starts, 1)), 3) for h in HORIZONS],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=800)
    parser.add_argument("--every", type=int, default=400)
    parser.add_argument("--train-episodes", type=int, default=10)
    parser.add_argument("--test-episodes", type=int, default=4)
    args, rest = parser.parse_known_args(argv)
    cfg = dreamer.parse_config(dreamer.Config, dreamer.__doc__, rest)
    if cfg.version != "v3":
        raise ValueError(
            f"the probe reads DreamerV3's two-hot reward head; got --version {cfg.version}"
        )
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    env = dreamer.make_env(cfg)
    env.set_seed(cfg.seed)
    episodes = collect(env, cfg, args.train_episodes + args.test_episodes)
    train, test = episodes[: args.train_episodes], episodes[args.train_episodes :]
    agent = dreamer.make_agent(cfg, env.observation_spec[cfg.obs_key].shape)
    reward_net = next(m for m in agent.model_loss.modules() if isinstance(m, dreamer.TwoHotHead))
    buffer = dreamer.ReplayBuffer(
        storage=dreamer.LazyTensorStorage(len(train)), batch_size=cfg.batch_size
    )
    buffer.extend(train.exclude(("next", "true_obs")))
    start = time.perf_counter()
    for it in range(1, args.updates + 1):
        dreamer.update(agent, dreamer.sample_batch(buffer, cfg), model_only=True)
        if it % args.every == 0:
            line = {"updates": it, "wall_s": round(time.perf_counter() - start, 1)}
            line.update(report(agent, reward_net, train, test))
            print(json.dumps(line), flush=True)
    env.close()


if __name__ == "__main__":
    main()
