"""SaLinA-style agents over a workspace, and FLARE-style computation tasks.

:class:`Workspace` holds named variables over time in the rollout layout (time is the last
batch dim). Agents read and write it: :class:`Agents` runs several in sequence,
:class:`TemporalAgent` over time, :class:`EnvAgent`/:class:`ModelAgent` step an env or a model
of one, :class:`ModuleAgent` runs any TensorDict module, :class:`DataLoaderAgent` puts stored
data in, :class:`NRemoteAgent` runs an agent in several processes over one shared workspace,
and :func:`replay` reruns an agent over stored steps.
"""

from torchrl.agents.agent import Agent, Agents, TemporalAgent, replay
from torchrl.agents.data_agent import DataLoaderAgent
from torchrl.agents.env_agent import EnvAgent, ModelAgent
from torchrl.agents.module_agent import ModuleAgent
from torchrl.agents.remote import NRemoteAgent
from torchrl.agents.workspace import Workspace

# --- computation tasks (helper "tasks": torchrl/agents/tasks.py, evaluation.py) -------------
# Their public names are exported here once those modules land.

__all__ = [
    "Agent",
    "Agents",
    "DataLoaderAgent",
    "EnvAgent",
    "ModelAgent",
    "ModuleAgent",
    "NRemoteAgent",
    "TemporalAgent",
    "Workspace",
    "replay",
]
