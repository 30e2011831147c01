"""``EnvAgent`` and ``ModelAgent``: an environment, or a model of one, as an agent.

Both write the rollout layout of the library. Called at step ``t > 0``, they read step
``t - 1`` (its observation, the action the policy wrote there, any state the policy left under
``"next"``), step it, write the transition's ``("next", ...)`` entries at ``t - 1`` and the
input of the next step (``step_mdp``, with finished sub-envs reset) at ``t``. Called at
``t == 0`` an env agent writes its current state (after a reset the first time). So a run of
``n`` steps ``Agents(env_agent, policy_agent)`` holds ``n - 1`` full transitions and a last step
with observation and action: ``workspace.copy_n_last_steps(1)`` and a run from ``t=1`` go on
where it ended.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import DONE, NEXT, REWARD
from torchrl.agents.agent import Agent
from torchrl.agents.workspace import Workspace, read_entry
from torchrl.envs import EnvBase

__all__ = ["EnvAgent", "ModelAgent"]


class EnvAgent(Agent):
    """Makes any :class:`~torchrl.envs.EnvBase` (with its transforms) an agent.

    With ``auto_reset=True`` (acquisition) the env goes on across calls: finished sub-envs are
    reset as they finish (``step_and_maybe_reset``) and a run at ``t=0`` starts from where the
    last run left the env. With ``auto_reset=False`` (episodes) a run at ``t=0`` resets every
    sub-env, and a sub-env that is done stays frozen in the workspace: its later steps repeat
    its last one, with zero reward, so that ``TemporalAgent(..., stop_variable="done")`` runs
    whole episodes (the env itself resets it and steps on unseen).

    Args:
        env: the environment; the workspace's batch size is ``env.batch_size``.
        auto_reset: see above.
        done_key: the root done flag (frozen sub-envs with ``auto_reset=False``).
        reward_key: the reward under ``"next"`` (zeroed on frozen steps).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.agents import Agents, TemporalAgent, Workspace
        >>> env = PendulumEnv(batch_size=[3], seed=0)
        >>> class Zero(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("action", t, torch.zeros(3, 1))
        >>> ws = Workspace()
        >>> TemporalAgent(Agents(EnvAgent(env), Zero()))(ws, t=0, n_steps=4)
        >>> ws.to_tensordict()["next", "reward"].shape
        torch.Size([3, 4, 1])
    """

    def __init__(
        self,
        env: EnvBase,
        auto_reset: bool = True,
        done_key: Any = DONE,
        reward_key: Any = REWARD,
    ) -> None:
        super().__init__()
        if not isinstance(env, EnvBase):
            raise TypeError(f"EnvAgent: env must be an EnvBase, got {type(env).__name__}")
        self.env = env
        self.auto_reset = auto_reset
        self.done_key = done_key
        self.reward_key = reward_key
        self._current = _Current()
        self._root_keys: list[Any] = []  # what a reset writes (observations, flags, states)
        self._step_keys: list[Any] = []  # what a step writes under "next"
        self._step_dests: list[Any] = []  # the same under "next", as tuples
        self._next_keys: tuple[Any, ...] = ()  # those that are no state (left out of the input)

    def seed(self, seed: int) -> None:
        self.env.set_seed(seed)
        self._current.td = None

    def reset_state(self) -> None:
        """Forgets the env's current state: the next run at ``t=0`` resets it."""
        self._current.td = None

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        if t == 0:
            state = self._current.td
            if state is None or not self.auto_reset:
                state = self._current.td = self.env.reset()
                self._root_keys = list(state.keys(True, True))
            workspace.set_step(0, state, keys=self._root_keys)
            return
        if self._current.td is None:
            raise RuntimeError(
                f"EnvAgent: asked to step at t={t} but the env was never reset; start a run at t=0"
            )
        # Step t - 1 without the env's "next" outputs that are no state (the reward): entries
        # under "next" that are states may come from the policy (a recurrent policy's next
        # state), which step_mdp carries to step t.
        current = workspace.get_step(t - 1, exclude=self._next_keys)
        # Finished sub-envs are reset in both modes (many envs refuse a step after a done);
        # without auto_reset the workspace then shows them frozen instead.
        transition, state = self.env.step_and_maybe_reset(current)
        self._current.td = state
        next_td = read_entry(transition, NEXT)
        if not self._step_keys:
            roots = set(self._root_keys)
            self._step_keys = list(next_td.keys(True, True))
            self._step_dests = [(NEXT, *_path(k)) for k in self._step_keys]
            self._next_keys = tuple((NEXT, *_path(k)) for k in self._step_keys if k not in roots)
        # The transition's outputs at t - 1 and the next input at t (the policy's outputs kept
        # by step_mdp are left out: the policy writes them at t), with one copy call.
        workspace._write_steps(
            (
                (t - 1, next_td, NEXT, self._step_keys, self._step_dests),
                (t, state, None, self._root_keys, None),
            )
        )
        if not self.auto_reset:
            self._freeze_finished(workspace, t, next_td.keys(True, True))

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        """Nothing to do: the stored steps are the env's output."""

    def _freeze_finished(self, workspace: Workspace, t: int, next_keys: Any) -> None:
        """Sub-envs that finished stay at their last step: done, zero reward from then on."""
        assert self._current.td is not None
        nb = len(workspace.batch_size or ())

        def rows(flag: Any) -> Any:
            return flag.reshape(*flag.shape[:nb], -1).any(-1)

        before = rows(workspace.get(self.done_key, t - 1))  # frozen already
        now = rows(workspace.get((NEXT, self.done_key), t - 1)) & ~before  # finished at t - 1
        if not bool((before | now).any()):
            return
        next_keys = list(next_keys)
        state_keys = self._root_keys
        for key in self._root_keys:
            workspace.get(key, t)[before | now] = workspace.get(key, t - 1)[before | now]
        for key in next_keys:
            nested = (NEXT, *key) if isinstance(key, tuple) else (NEXT, key)
            if key == self.reward_key:
                workspace.get(nested, t - 1)[before] = 0
                continue
            if key in state_keys:  # the root of step t shows where the episode ended
                workspace.get(key, t)[now] = workspace.get(nested, t - 1)[now]
            if key in workspace:
                workspace.get(nested, t - 1)[before] = workspace.get(key, t - 1)[before]
        self._current.td = workspace.get_step(t).select(*state_keys)


class _Current:
    """The env's current input, kept in a plain object: a write to an ``nn.Module`` attribute
    goes through ``nn.Module.__setattr__`` (over a microsecond, at every step)."""

    __slots__ = ("td",)

    def __init__(self) -> None:
        self.td: TensorDictBase | None = None


class ModelAgent(Agent):
    """A model of the environment as an agent: steps come from a TensorDict module.

    The model reads step ``t - 1`` (state and action) and writes the transition under
    ``"next"`` (next observation, reward, done flags), as a
    :class:`~torchrl.envs.model_based.WorldModelEnv`'s world model does. At ``t == 0`` it
    writes nothing: imagination starts from the states already in the workspace (real ones
    put there by a data-loader agent or an env agent). Swap it for the env agent of an
    acquisition stack to run the same :class:`~torchrl.agents.TemporalAgent` in imagination.
    (A ``WorldModelEnv`` can also be wrapped in :class:`EnvAgent` as any env.)

    Args:
        model: the transition model, e.g. a ``TensorDictModule`` writing
            ``("next", "observation")`` and ``("next", "reward")``.
        out_keys: the model's outputs (default: its ``out_keys``); those under ``"next"``
            move to the root of step ``t`` (``step_mdp``).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.agents import Workspace
        >>> class Dyn(torch.nn.Module):
        ...     def forward(self, obs, action):
        ...         return obs + action, -obs.pow(2).sum(-1, keepdim=True)
        >>> model = TensorDictModule(
        ...     Dyn(), ["observation", "action"], [("next", "observation"), ("next", "reward")])
        >>> ws = Workspace(batch_size=[2])
        >>> ws.set("observation", 0, torch.ones(2, 1))
        >>> ws.set("action", 0, torch.ones(2, 1))
        >>> ModelAgent(model)(ws, t=1)
        >>> ws.get("observation", 1)
        tensor([[2.],
                [2.]])
    """

    def __init__(self, model: TensorDictModuleBase, out_keys: list[Any] | None = None) -> None:
        super().__init__()
        self.model = model
        keys = out_keys if out_keys is not None else getattr(model, "out_keys", None)
        if keys is None:
            raise ValueError(f"ModelAgent: {type(model).__name__} has no out_keys; pass out_keys")
        self.out_keys = list(keys)

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        if t == 0:
            return
        current = workspace.get_step(t - 1, exclude=(NEXT,))
        out = self.model(current)
        out = current if out is None else out
        for key in self.out_keys:
            value = out.get(key, None)
            if value is None:
                raise KeyError(f"ModelAgent: the model did not write {key!r} at step {t - 1}")
            workspace.set(key, t - 1, value)
            if isinstance(key, tuple) and key[0] == NEXT:
                root = key[1:] if len(key) > 2 else key[1]
                if root != REWARD:
                    workspace.set(root, t, value)

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        """Nothing to do: the stored steps are the model's output."""


def _path(key: Any) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)
