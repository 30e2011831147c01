"""``Agent``, ``Agents``, ``TemporalAgent`` and ``replay``: computations over a workspace.

An agent is an ``nn.Module`` whose ``forward(workspace, t, **kwargs)`` reads variables of a
:class:`~torchrl.agents.Workspace` and writes others. Agents compose in sequence
(:class:`Agents`) and over time (:class:`TemporalAgent`). :func:`replay` runs an agent over
steps already stored in a workspace in one call, the way a loss needs them.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torchrl._types import NestedKey
from torchrl.agents.workspace import Workspace
from torchrl.modules.recurrent import set_recurrent_mode

__all__ = ["Agent", "Agents", "TemporalAgent", "replay"]


class Agent(nn.Module):
    """The base of every agent: ``forward(workspace, t, **kwargs)`` reads and writes variables.

    Subclasses write :meth:`forward`; :meth:`replay` (run over stored steps) defaults to one
    call per step, and :meth:`seed` to nothing.

    Examples:
        >>> import torch
        >>> class Counter(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("count", t, torch.full((2,), float(t)))
        >>> ws = Workspace(batch_size=[2])
        >>> TemporalAgent(Counter())(ws, t=0, n_steps=3)
        >>> ws.get_full("count")
        tensor([[0., 1., 2.],
                [0., 1., 2.]])
    """

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(workspace, t)")

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        """Runs this agent over the stored steps ``t0..time_length-1`` of ``workspace``."""
        for t in range(t0, workspace.time_length):
            self(workspace, t=t, **kwargs)

    def seed(self, seed: int) -> None:
        """Seeds what this agent draws from (an env, a sampler); nothing by default."""


class Agents(Agent):
    """Runs several agents one after the other at each call.

    Args:
        *agents: the agents, in the order they run.

    Examples:
        >>> import torch
        >>> class Write(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("x", t, torch.ones(1))
        >>> class Double(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("y", t, 2 * workspace.get("x", t))
        >>> ws = Workspace(batch_size=[1])
        >>> Agents(Write(), Double())(ws, t=0)
        >>> ws.get("y", 0)
        tensor([2.])
    """

    def __init__(self, *agents: Agent) -> None:
        super().__init__()
        for i, agent in enumerate(agents):
            if not isinstance(agent, Agent):
                raise TypeError(
                    f"Agents: argument {i} must be an Agent, got {type(agent).__name__} "
                    "(wrap a TensorDictModule in ModuleAgent, an env in EnvAgent)"
                )
        self.agents = nn.ModuleList(agents)

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        for agent in self.agents:
            agent(workspace, t=t, **kwargs)

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        for agent in self.agents:
            agent.replay(workspace, t0=t0, **kwargs)  # type: ignore[operator]

    def seed(self, seed: int) -> None:
        for agent in self.agents:
            agent.seed(seed)  # type: ignore[operator]


class TemporalAgent(Agent):
    """Runs an agent at steps ``t0, t0 + 1, ...`` until ``n_steps`` or a stop variable.

    The run stops after ``n_steps`` steps, or after the first step ``t`` at which the stop
    variable (a boolean ``[*batch_size]`` or ``[*batch_size, 1]`` entry, e.g. ``"done"``) is
    True for every row, whichever comes first. A run from ``t`` replaces the steps after ``t``
    (step ``t`` may hold inputs, such as start states): the workspace's length becomes ``t``
    plus the steps run. The keyword arguments of a
    call override the ones given here; the others go to the agent.

    Args:
        agent: the agent run at each step.
        n_steps: the number of steps of a run (``None``: until the stop variable).
        stop_variable: the key whose all-True value ends a run.
        t0: the first step of a run.

    Examples:
        >>> import torch
        >>> class Tick(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("done", t, torch.tensor([t >= 2, t >= 4]))
        >>> ws = Workspace(batch_size=[2])
        >>> TemporalAgent(Tick(), stop_variable="done")(ws)
        >>> ws.time_length
        5
    """

    def __init__(
        self,
        agent: Agent,
        n_steps: int | None = None,
        stop_variable: NestedKey | None = None,
        t0: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(agent, Agent):
            raise TypeError(f"TemporalAgent: agent must be an Agent, got {type(agent).__name__}")
        self.agent = agent
        self.n_steps = n_steps
        self.stop_variable = stop_variable
        self.t0 = t0

    def forward(  # type: ignore[override]
        self,
        workspace: Workspace,
        t: int | None = None,
        n_steps: int | None = None,
        stop_variable: NestedKey | None = None,
        **kwargs: Any,
    ) -> None:
        t = self.t0 if t is None else t
        n_steps = self.n_steps if n_steps is None else n_steps
        stop_variable = self.stop_variable if stop_variable is None else stop_variable
        if n_steps is None and stop_variable is None:
            raise ValueError("TemporalAgent needs n_steps, a stop_variable, or both")
        if n_steps is not None and n_steps < 1:
            raise ValueError(f"TemporalAgent: n_steps must be >= 1, got {n_steps}")
        if t < 0:
            raise ValueError(f"TemporalAgent: t must be >= 0, got {t}")
        if workspace.time_length > t + 1:
            # this run replaces the steps after t (step t may hold its inputs, e.g. start states)
            workspace.set_time_length(t + 1)
        agent, step = self.agent, t
        while n_steps is None or step < t + n_steps:
            agent(workspace, t=step, **kwargs)
            if stop_variable is not None and bool(workspace.get(stop_variable, step).all()):
                break
            step += 1

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        self.agent.replay(workspace, t0=t0, **kwargs)  # type: ignore[operator]

    def seed(self, seed: int) -> None:
        self.agent.seed(seed)  # type: ignore[operator]


def replay(agent: Agent, workspace: Workspace, t0: int = 0, **kwargs: Any) -> Workspace:
    """Runs ``agent`` over the steps stored in ``workspace``, in as few calls as it can.

    A :class:`~torchrl.agents.ModuleAgent` runs its module once on the whole sequence
    ``[*B, T]``, in recurrent mode: an LSTM/GRU module rebuilds its state from the stored
    states and ``"is_init"`` flags (:func:`~torchrl.modules.set_recurrent_mode`). Env and model
    agents write nothing (the stored steps are their output). Other agents run step by step.
    Gradients flow unless the caller disables them: use it to compute a loss on acquired data.

    Args:
        agent: the agent (or a composition of agents) to replay.
        workspace: the stored steps; the agent's outputs are written into it.
        t0: the first step replayed.
        **kwargs: passed to the agents.

    Returns:
        ``workspace``.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.agents import ModuleAgent
        >>> agent = ModuleAgent(TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["value"]))
        >>> ws = Workspace.from_tensordict(
        ...     __import__("tensordict").TensorDict({"obs": torch.ones(2, 4, 3)}, [2, 4]))
        >>> replay(agent, ws).get_full("value").shape
        torch.Size([2, 4, 1])
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"replay: agent must be an Agent, got {type(agent).__name__}")
    if not 0 <= t0 <= workspace.time_length:
        raise ValueError(f"replay: t0 must be in [0, {workspace.time_length}], got {t0}")
    with set_recurrent_mode(True):
        agent.replay(workspace, t0=t0, **kwargs)
    return workspace
