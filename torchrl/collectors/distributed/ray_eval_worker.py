"""``RayEvalWorker``: evaluation rollouts in a Ray actor of their own, fed with new weights.

The actor process runs ``init_fn`` first (process-level set-up that must precede other imports),
then builds the env and the policy. :meth:`RayEvalWorker.submit` sends weights and starts a
rollout; :meth:`RayEvalWorker.poll` returns its result once it is there. ``ray`` is optional
(``pip install "torchrl[ray]"``) and imported when a worker is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, REWARD
from torchrl._types import NestedKey
from torchrl._utils import import_optional
from torchrl.collectors._policy import WeightsLike, copy_weights, named_weights
from torchrl.collectors._pool import WorkerError
from torchrl.collectors.distributed.utils import policy_weights, start_local_ray
from torchrl.collectors.evaluator import first_episodes, rollout_entry
from torchrl.envs.utils import ExplorationType, set_exploration_type

__all__ = ["RayEvalWorker"]


class EvalActorCore:
    """What runs inside the Ray actor: the env, the policy and one rollout per request.

    Args:
        init_fn: called first (``None``: nothing).
        env_maker: builds the env.
        policy_maker: builds the policy from the env.
        reward_keys: the reward entry of the rollouts.
        done_keys: the done entry of the rollouts.
    """

    def __init__(
        self,
        init_fn: Callable[[], None] | None,
        env_maker: Callable[[], Any],
        policy_maker: Callable[[Any], Any],
        reward_keys: NestedKey = (NEXT, REWARD),
        done_keys: NestedKey = (NEXT, DONE),
    ) -> None:
        if init_fn is not None:
            init_fn()
        self.env = env_maker()
        self.policy = policy_maker(self.env)
        self.reward_key = reward_keys
        self.done_key = done_keys
        self._weights = named_weights(self.policy) if isinstance(self.policy, nn.Module) else {}

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    @torch.no_grad()
    def evaluate(
        self, weights: WeightsLike | None, max_steps: int, deterministic: bool = True
    ) -> dict[str, Any]:
        """Loads ``weights`` and runs one rollout of at most ``max_steps`` steps.

        Args:
            weights: the policy's new weights (``None``: keep the current ones).
            max_steps: steps of the rollout at most (it stops when every sub-env is done).
            deterministic: evaluate the deterministic policy (else sample).

        Returns:
            ``{"reward": mean return of the first episode of each sub-env, "episode_length":
            their mean length, "frames": [T, H, W, 3] uint8 frames or None}``.
        """
        if weights is not None and self._weights:
            copy_weights(self._weights, weights)
        frames: list[torch.Tensor] = []
        render = getattr(self.env, "render", None)
        records = callable(render) and getattr(self.env, "render_mode", None) == "rgb_array"

        def grab(env: Any, td: TensorDictBase) -> None:
            frames.append(torch.as_tensor(cast(Callable[[], Any], render)()))

        mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        with set_exploration_type(mode):
            rollout = self.env.rollout(
                max_steps,
                self.policy,
                callback=grab if records else None,
                break_when_any_done=False,
                break_when_all_done=True,
            )
        returns, lengths, _ = first_episodes(
            rollout_entry(rollout, self.reward_key, "RayEvalWorker"),
            rollout_entry(rollout, self.done_key, "RayEvalWorker"),
        )
        return {
            "reward": float(returns.mean()),
            "episode_length": float(lengths.float().mean()),
            "frames": torch.stack(frames).to(torch.uint8) if frames else None,
        }


class RayEvalWorker:
    """Asynchronous evaluation in a Ray actor: submit weights, poll for the result.

    The actor runs ``init_fn()``, ``env = env_maker()`` and ``policy = policy_maker(env)``
    once. :meth:`submit` sends weights and starts a rollout without waiting; :meth:`poll`
    returns ``{"reward", "episode_length", "frames"}`` once it is done (``None`` before).
    A worker with a ``name`` can be reached again with :meth:`from_name`. An actor that dies
    or raises makes :meth:`poll`/:meth:`wait` raise :class:`~torchrl.collectors.WorkerError`.
    Ray is started (locally) when it is not running yet.

    Args:
        init_fn: called first in the actor process (``None``: nothing).
        env_maker: builds the eval env in the actor.
        policy_maker: builds the policy from that env, in the actor.
        num_gpus: GPUs of the actor (a clear error when the cluster has fewer).
        reward_keys: the reward entry of the rollouts.
        name: registers the actor under this name in Ray.
        **remote_kwargs: other Ray actor options (``num_cpus``, ``runtime_env``, ...).

    Examples:
        >>> from torchrl.collectors.distributed import RayEvalWorker
        >>> from torchrl.envs import PendulumEnv
        >>> worker = RayEvalWorker(None, PendulumEnv, lambda env: None, num_gpus=0)  # doctest: +SKIP
        >>> worker.submit(None, max_steps=10)  # doctest: +SKIP
        >>> sorted(worker.wait(60))  # doctest: +SKIP
        ['episode_length', 'frames', 'reward']
        >>> worker.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        init_fn: Callable[[], None] | None,
        env_maker: Callable[[], Any],
        policy_maker: Callable[[Any], Any],
        *,
        num_gpus: int = 1,
        reward_keys: NestedKey = (NEXT, REWARD),
        name: str | None = None,
        **remote_kwargs: Any,
    ) -> None:
        ray = import_optional("ray", "ray")
        if not ray.is_initialized():
            start_local_ray(ray, {}, "RayEvalWorker")
        available = ray.cluster_resources().get("GPU", 0)
        if num_gpus > available:
            raise ValueError(
                f"RayEvalWorker: num_gpus={num_gpus} but the Ray cluster has {available:g} GPU(s); "
                "pass num_gpus=0 to evaluate on CPU"
            )
        options: dict[str, Any] = {"num_gpus": num_gpus, "num_cpus": 1, **remote_kwargs}
        if name is not None:
            options["name"] = name
        actor_cls = ray.remote(EvalActorCore).options(**options)
        self.name = name
        self._actor = actor_cls.remote(init_fn, env_maker, policy_maker, reward_keys)
        self._ref: Any = None
        # fails here (with the actor's error) when init_fn, env_maker or policy_maker raise
        self.pid = self._get(self._actor.pid.remote(), None, "starting")

    @classmethod
    def from_name(cls, name: str) -> RayEvalWorker:
        """Connects to the running worker registered as ``name``.

        Args:
            name: the ``name`` the worker was built with.

        Returns:
            A handle on that worker.
        """
        ray = import_optional("ray", "ray")
        worker = cls.__new__(cls)
        worker.name = name
        worker._actor = ray.get_actor(name)
        worker._ref = None
        worker.pid = worker._get(worker._actor.pid.remote(), None, "connecting")
        return worker

    def _get(self, ref: Any, timeout: float | None, what: str) -> Any:
        ray = import_optional("ray", "ray")
        ready, _ = ray.wait([ref], timeout=timeout)
        if not ready:
            raise TimeoutError(f"RayEvalWorker: no answer within {timeout} s while {what}")
        try:
            return ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
            pid = getattr(self, "pid", "?")
            raise WorkerError(f"RayEvalWorker (pid {pid}) failed while {what}: {err}") from err

    @property
    def pending(self) -> bool:
        """Whether a submitted rollout has not been collected by :meth:`poll` yet."""
        return self._ref is not None

    def submit(
        self, weights: WeightsLike | None, max_steps: int = 1000, deterministic: bool = True
    ) -> None:
        """Sends weights and starts a rollout; returns at once.

        Args:
            weights: a module (its weights are copied now), a state dict or a TensorDict of
                weights (``None``: keep the actor's current weights).
            max_steps: steps of the rollout at most.
            deterministic: evaluate the deterministic policy.

        Raises:
            RuntimeError: a rollout is still pending (poll it first).
        """
        if self._ref is not None:
            raise RuntimeError("RayEvalWorker.submit: a rollout is pending; poll() it first")
        if isinstance(weights, nn.Module):
            weights = policy_weights(weights)
        elif isinstance(weights, TensorDictBase):
            weights = weights.detach().cpu()
        self._ref = self._actor.evaluate.remote(weights, int(max_steps), deterministic)

    def poll(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The result of the submitted rollout if it is done within ``timeout``, else ``None``.

        Args:
            timeout: seconds to wait (0: just look).
        """
        if self._ref is None:
            return None
        try:
            result = self._get(self._ref, timeout, "evaluating")
        except TimeoutError:
            return None
        self._ref = None
        return cast(dict[str, Any], result)

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Waits for the submitted rollout (``None`` when none was submitted).

        Args:
            timeout: seconds to wait at most (``None``: no limit).

        Raises:
            TimeoutError: the rollout did not end in time.
        """
        if self._ref is None:
            return None
        result = self._get(self._ref, timeout, "evaluating")
        self._ref = None
        return cast(dict[str, Any], result)

    def shutdown(self) -> None:
        """Kills the actor (a named one too)."""
        actor, self._actor = getattr(self, "_actor", None), None
        if actor is not None:
            ray = import_optional("ray", "ray")
            ray.kill(actor)

    def __repr__(self) -> str:
        return f"RayEvalWorker(name={self.name!r}, pid={getattr(self, 'pid', None)})"
