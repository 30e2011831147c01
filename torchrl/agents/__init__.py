"""SaLinA-style agents over a workspace, and FLARE-style computation tasks.

:class:`Workspace` holds named variables over time in the rollout layout (time is the last
batch dim). Agents read and write it: :class:`Agents` runs several in sequence,
:class:`TemporalAgent` over time, :class:`EnvAgent`/:class:`ModelAgent` step an env or a model
of one, :class:`ModuleAgent` runs any TensorDict module, :class:`DataLoaderAgent` puts stored
data in, :class:`NRemoteAgent` runs an agent in several processes over one shared workspace,
and :func:`replay` reruns an agent over stored steps.

A :class:`ComputationTask` bundles a loss, its own buffer and its training schedule;
:class:`TaskRunner` feeds several tasks (which may share modules) from the same collectors, and
:class:`EvaluationTask` schedules background evaluations.
"""

from torchrl.agents.agent import Agent, Agents, TemporalAgent, replay
from torchrl.agents.data_agent import DataLoaderAgent
from torchrl.agents.env_agent import EnvAgent, ModelAgent
from torchrl.agents.evaluation import EvaluationTask
from torchrl.agents.module_agent import ModuleAgent
from torchrl.agents.remote import NRemoteAgent
from torchrl.agents.tasks import ComputationTask, TaskRunner, shared_parameters
from torchrl.agents.workspace import Workspace

__all__ = [
    "Agent",
    "Agents",
    "ComputationTask",
    "DataLoaderAgent",
    "EnvAgent",
    "EvaluationTask",
    "ModelAgent",
    "ModuleAgent",
    "NRemoteAgent",
    "TaskRunner",
    "TemporalAgent",
    "Workspace",
    "replay",
    "shared_parameters",
]
