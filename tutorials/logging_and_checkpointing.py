"""Logging, the Trainer's hooks, and checkpointing a run to resume it
==================================================================

A training run that lasts more than a few minutes needs three things besides the algorithm:
its numbers written somewhere a person (or a plot) can read them, a loop whose pieces can be
added and removed without rewriting it, and checkpoints it can resume from after a crash or a
preemption. This tutorial shows torchrl's answer to each:

1. the experiment loggers of ``torchrl.record.loggers`` (CSV, TensorBoard; W&B, MLflow and
   Trackio share the interface);
2. the :class:`~torchrl.trainers.Trainer`, whose loop calls *hooks* at named points, on PPO
   for CartPole-v1 (the recipe of ``examples/ppo_cartpole_trainer.py``), with a hook of our
   own;
3. the trainer's checkpoint: a run that crashes half-way and a new process that resumes it;
4. :class:`~torchrl.checkpoint.Checkpoint` and
   :class:`~torchrl.checkpoint.CheckpointRotation`, for a loop written by hand: named
   components, rotation, and a resume that continues exactly where the run stopped.

Everything is written into a temporary folder, removed at the end.

Run it: ``python tutorials/logging_and_checkpointing.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.checkpoint import Checkpoint, CheckpointRotation, GlobalRNGState, read_manifest
from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE
from torchrl.record.loggers import CSVLogger, TensorboardLogger, generate_exp_name, get_logger
from torchrl.trainers import (
    HOOK_POINTS,
    BatchSubSampler,
    LogReward,
    Recorder,
    Trainer,
    TrainerHookBase,
    UpdateWeights,
    load_checkpoint,
)

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead
workdir = tempfile.mkdtemp(prefix="torchrl-tutorial-")

# %%
# 1. Loggers
# ----------
#
# Every logger implements one small interface: ``log_scalar(name, value, step)``,
# ``log_hparams(config)``, ``log_video`` and ``log_histogram``. A logger is built for one
# experiment, ``exp_name``, under ``log_dir``; :func:`~torchrl.record.loggers.generate_exp_name`
# makes a unique name (model, experiment, a random id and the time), so runs never overwrite
# each other.
exp_name = generate_exp_name("PPO", "cartpole")
print("experiment name:", exp_name)

# %%
# :class:`~torchrl.record.loggers.CSVLogger` needs no extra package: one ``step,value`` CSV per
# scalar (flushed at each call, so a crashed run keeps what it logged), the configuration in
# ``hparams.json``. A ``"/"`` in a name makes a sub-folder.
csv_logger = CSVLogger(exp_name, log_dir=os.path.join(workdir, "csv_logs"))
csv_logger.log_hparams({"lr": 2e-3, "optim": {"epochs": 10, "minibatch": 256}})
for step in (0, 100, 200):
    csv_logger.log_scalar("train/reward", 1.0 + step / 100, step=step)
csv_logger.close()
for path in sorted(csv_logger.root.rglob("*.*")):
    print(f"--- {path.relative_to(csv_logger.root)}\n{path.read_text().strip()}")

# %%
# :class:`~torchrl.record.loggers.TensorboardLogger` writes event files that ``tensorboard
# --logdir`` displays; it needs ``pip install "torchrl[tensorboard]"`` (the import happens when
# the logger is built, and a missing package is reported by name). Here we read the events
# back with TensorBoard's own reader.
if importlib.util.find_spec("tensorboard") is not None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_logger = TensorboardLogger(exp_name, log_dir=os.path.join(workdir, "tb_logs"))
    for step in (0, 100, 200):
        tb_logger.log_scalar("train/reward", 1.0 + step / 100, step=step)
    tb_logger.close()
    events = EventAccumulator(os.path.join(workdir, "tb_logs", exp_name))
    events.Reload()
    print("tensorboard:", [(e.step, e.value) for e in events.Scalars("train/reward")])
else:
    print("tensorboard is not installed: skipping the TensorboardLogger")

# %%
# :func:`~torchrl.record.loggers.get_logger` builds a logger from its type name, which is what
# a configuration file holds (``"csv"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"``,
# ``"trackio"``; ``None`` means no logging). With ``service_backend="process"`` the logger
# runs in a process of its own, fed through a queue, so that a slow backend never stalls
# training.
logger = get_logger("csv", os.path.join(workdir, "logs"), "ppo_cartpole")
print(logger)

# %%
# 2. The Trainer and its hooks
# ----------------------------
#
# The :class:`~torchrl.trainers.Trainer` owns the loop: take a batch from the collector, run
# the optimization steps, log, checkpoint. Everything specific to an algorithm is an *op*
# registered at one of these points, called in this order in every iteration:
for point, signature in HOOK_POINTS.items():
    print(f"{point:20s} {signature}")

# %%
# The pieces of PPO on CartPole: a categorical actor, a critic, a collector of 8 envs x 32
# steps, GAE and the clipped loss (see the "PPO from components" tutorial for each). They are
# built by a function because the resume below builds them a second time, as a new process
# would.
frames_per_batch = 256
total_frames = 768 if args.smoke else 8192


def make_ppo(total: int) -> tuple[SyncDataCollector, ProbabilisticActor, GAE, ClipPPOLoss]:
    env = GymEnv("CartPole-v1", num_envs=8)
    env.set_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(4, 2, num_cells=[64, 64], activation_class=nn.Tanh), ["observation"], ["logits"]
        ),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(4, 1, num_cells=[64, 64], activation_class=nn.Tanh), in_keys=["observation"]
    )
    collector = SyncDataCollector(env, actor, frames_per_batch=frames_per_batch, total_frames=total)
    loss_fn = ClipPPOLoss(
        actor, critic, entropy_bonus=False, normalize_advantage=True, loss_critic_type="l2"
    )
    return collector, actor, GAE(gamma=0.98, lmbda=0.8, value_network=critic), loss_fn


# %%
# A hook of our own: it counts the episodes that ended in each batch and logs the total. It
# has state, so it registers itself as a *module* of the trainer too: its ``state_dict`` goes
# into the checkpoint and is restored on resume, like the optimizer's.
class EpisodeCounter(TrainerHookBase):
    def __init__(self) -> None:
        self.episodes = 0

    def __call__(self, batch: TensorDictBase) -> dict:
        self.episodes += int(batch["next", "done"].sum())
        return {"episodes": self.episodes}

    def state_dict(self) -> dict:
        return {"episodes": self.episodes}

    def load_state_dict(self, state_dict: dict) -> None:
        self.episodes = int(state_dict["episodes"])

    def register(self, trainer: Trainer, name: str = "episode_counter") -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)


# %%
# The trainer, and the hooks that make it PPO: GAE on each batch at ``batch_process``,
# minibatches drawn from the batch (:class:`~torchrl.trainers.BatchSubSampler`), the new
# weights pushed to the collector (:class:`~torchrl.trainers.UpdateWeights`), the training
# reward (:class:`~torchrl.trainers.LogReward`) and a deterministic evaluation every 4 batches
# (:class:`~torchrl.trainers.Recorder`, which logs ``"return_evaluation"``).
#
# ``save_trainer_file`` turns on checkpointing: every ``save_trainer_interval`` frames the
# trainer writes its whole state to that file, atomically (a temporary file renamed over
# the previous one, so a crash mid-write never leaves half a checkpoint).
checkpoint_file = os.path.join(workdir, "ppo_trainer.pt")
eval_env = GymEnv("CartPole-v1", num_envs=4)
eval_env.set_seed(1)


def make_trainer(total: int, logger: CSVLogger) -> tuple[Trainer, ProbabilisticActor]:
    collector, actor, advantage, loss_fn = make_ppo(total)
    trainer = Trainer(
        collector=collector,
        total_frames=total,
        optim_steps_per_batch=10,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=2e-3),
        logger=logger,
        clip_norm=0.5,
        progress_bar=False,
        seed=0,
        save_trainer_file=checkpoint_file,
        save_trainer_interval=frames_per_batch if args.smoke else 4 * frames_per_batch,
        log_interval=0,  # write every value (the default thins them to one per 10k frames)
    )

    def compute_advantage(batch: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            advantage(batch)
        return batch.reshape(-1)

    trainer.register_op("batch_process", compute_advantage)
    BatchSubSampler(batch_size=256).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    LogReward().register(trainer)
    EpisodeCounter().register(trainer)
    Recorder(
        record_interval=1 if args.smoke else 4,
        record_frames=100 if args.smoke else 500,
        policy_exploration=actor,
        environment=eval_env,
    ).register(trainer)
    return trainer, actor


trainer, actor = make_trainer(total_frames, logger)
print(trainer)

# %%
# 3. A crash, and the resume
# --------------------------
#
# To stand for a crash, one more op raises once the run passes 40% of its frames. The trainer
# still shuts its collector down (``train`` does it whatever happens), and the checkpoint on
# disk is the last one written before the crash: the frames collected since then are lost.
crash_at = int(0.4 * total_frames)


def crash(batch: TensorDictBase) -> None:
    if trainer.collected_frames >= crash_at:
        raise RuntimeError(f"simulated crash at {trainer.collected_frames} frames")


trainer.register_op("post_steps_log", crash)
try:
    trainer.train()
except RuntimeError as err:
    print("the run stopped:", err)
evaluations_csv = logger.root / "scalars" / "return_evaluation.csv"
rows_before_crash = len(evaluations_csv.read_text().split())

# %%
# The checkpoint is a plain ``torch.save`` file of tensors and numbers, read back without
# unpickling arbitrary objects (:func:`~torchrl.trainers.load_checkpoint` uses
# ``weights_only=True``). It holds the counters, the loss module (actor, critic), every
# registered module (optimizer, hooks with state), the collector and the random generators.
saved = load_checkpoint(checkpoint_file)
print("checkpoint at", saved["collected_frames"], "frames; entries:", sorted(saved))
print("registered modules:", sorted(saved["modules"]))

# %%
# A new process builds the same objects, loads the file, and calls ``train`` again: it
# continues from the saved frame count, with the saved weights, optimizer moments, hook
# states and random generators. The logger appends to the same CSV files, so the curve
# continues too. The iterations between the checkpoint and the crash run a second time, so
# their values appear twice in the CSV, and they differ: a simulator's internal state (here,
# gymnasium's CartPoles mid-episode) is not part of a checkpoint.
resumed, actor = make_trainer(total_frames, logger)
resumed.load_from_file(checkpoint_file)
print(
    f"resumed at {resumed.collected_frames} frames, {resumed.optim_count} optimizer steps, "
    f"{resumed.latest_logs['episodes']:.0f} episodes so far"
)
resumed.train()
print(f"finished at {resumed.collected_frames} frames")
logger.close()

# %%
# The logged evaluations, read back from the CSV file: the run before the crash, and the
# resumed one picking up from the checkpoint.
rows = [line.split(",") for line in evaluations_csv.read_text().split()]
steps, values = [int(s) for s, _ in rows], [float(v) for _, v in rows]
print("evaluations (frames, return):", list(zip(steps, [round(v) for v in values])))
fig, ax = plt.subplots(figsize=(6, 3.5))
n = rows_before_crash
ax.plot(steps[:n], values[:n], marker="o", label="first run (crashed)")
ax.plot(steps[n:], values[n:], marker="o", label="resumed run")
ax.axvline(saved["collected_frames"], color="grey", linestyle="--", label="checkpoint")
ax.set_xlabel("frames")
ax.set_ylabel("evaluation return")
ax.set_title("PPO on CartPole-v1: crash and resume")
ax.legend(loc="upper left")
fig.tight_layout()
plt.show()

# %%
# 4. Checkpoints of a hand-written loop
# -------------------------------------
#
# Without a trainer, :class:`~torchrl.checkpoint.Checkpoint` saves *named components*, each
# with the adapter that suits it: modules, optimizers and collectors through
# ``state_dict``, replay buffers through their own ``dumps`` (one file per stored entry), JSON
# values as JSON, and the global random generators through
# :class:`~torchrl.checkpoint.GlobalRNGState`. A checkpoint is a folder with a
# ``manifest.json`` written last: a folder without a manifest is never taken for a checkpoint.
# :class:`~torchrl.checkpoint.CheckpointRotation` names them by step and keeps the newest (and
# optionally the best by some metric).
#
# The loop: collect, compute advantages, store the batch in a replay buffer, a few
# optimization steps on minibatches from it.


def make_run() -> dict:
    collector, actor, advantage, loss_fn = make_ppo(10**9)
    return {
        "collector": collector,
        "advantage": advantage,
        "loss": loss_fn,
        "optimizer": torch.optim.Adam(loss_fn.parameters(), lr=2e-3),
        "buffer": TensorDictReplayBuffer(storage=LazyTensorStorage(4096), batch_size=256),
        "progress": {"frames": 0, "best_length": 0.0},
    }


def optimize(run: dict, steps: int) -> torch.Tensor:
    """Takes ``steps`` optimizer steps; returns the buffer indices of the last minibatch."""
    for _ in range(steps):
        sample = run["buffer"].sample()
        losses = run["loss"](sample)
        run["optimizer"].zero_grad()
        (losses["loss_objective"] + losses["loss_critic"]).backward()
        run["optimizer"].step()
    return sample["index"]


def as_checkpoint(run: dict) -> Checkpoint:
    return Checkpoint(
        collector=run["collector"],
        loss=run["loss"],
        optimizer=run["optimizer"],
        replay_buffer=run["buffer"],
        rng=GlobalRNGState(),
        progress=run["progress"],
    )


run = make_run()
checkpoint = as_checkpoint(run)
rotation = CheckpointRotation(
    os.path.join(workdir, "checkpoints"), keep_last=2, keep_best=("mean_length", "max")
)
for i, batch in enumerate(run["collector"]):
    with torch.no_grad():
        run["advantage"](batch)
    run["buffer"].extend(batch.reshape(-1))
    optimize(run, 8)
    run["progress"]["frames"] += batch.numel()
    # mean episode length in this batch (CartPole pays 1 per step)
    length = round(batch.numel() / max(int(batch["next", "done"].sum()), 1), 1)
    run["progress"]["best_length"] = max(run["progress"]["best_length"], length)
    rotation.save(checkpoint, step=run["progress"]["frames"], metadata={"mean_length": length})
    if i == (2 if args.smoke else 7):
        break
print("kept:", [p.name for p in rotation.checkpoints()], "best:", rotation.best().name)
manifest = read_manifest(rotation.latest())
print("metadata:", manifest["metadata"])
for name, component in manifest["components"].items():
    print(f"  {name:14s} {component['type']:24s} saved by {component['adapter']}")

# %%
# What the run does next, from here: the minibatch it samples and the weights after one more
# optimizer step.
saved_weights = {k: v.clone() for k, v in run["loss"].state_dict().items()}
next_indices = optimize(run, 1)
next_weights = {k: v.clone() for k, v in run["loss"].state_dict().items()}
run["collector"].shutdown()

# %%
# A fresh set of objects (new random weights, an empty buffer), restored from the latest
# checkpoint. Because the random generators, the buffer's content and the optimizer's moments
# are part of it, the resumed run samples the same minibatch and takes the same step, to the
# last bit.
fresh = make_run()
result = rotation.load_latest(as_checkpoint(fresh))
print("restored:", sorted(result.loaded), "progress:", fresh["progress"])
print("buffer:", len(fresh["buffer"]), "transitions")
same = all(torch.equal(v, saved_weights[k]) for k, v in fresh["loss"].state_dict().items())
print("weights as saved:", same)
indices = optimize(fresh, 1)
print("same next minibatch:", torch.equal(indices, next_indices))
same = all(torch.equal(v, next_weights[k]) for k, v in fresh["loss"].state_dict().items())
print("same weights after one more step:", same)
fresh["collector"].shutdown()

# %%
# ``Checkpoint(format="archive")`` stores the same tree in one ZIP file instead of a folder
# (handy to copy around); ``load`` recognises either. ``strict="warn"`` or ``"ignore"`` lets a
# checkpoint load when some components are missing, and ``result.missing`` says which.
archive = as_checkpoint(fresh).save(os.path.join(workdir, "run.zip"), format="archive")
print("archive:", archive.name, f"{archive.stat().st_size / 1e6:.2f} MB")
shutil.rmtree(workdir)
