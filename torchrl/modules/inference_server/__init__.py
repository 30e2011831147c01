"""Batched policy serving for asynchronous collection: one server, many clients.

An :class:`InferenceServer` owns a policy and answers the requests of many clients (env
threads or worker processes) with one forward pass per batch of requests. Clients talk to it
through a transport: :class:`ThreadingTransport` and :class:`SlotTransport` (threads of the
server's process), :class:`SharedMemoryTransport` (worker processes, shared-memory slots),
:class:`MPTransport` (worker processes, pickled payloads) and :class:`RayTransport` (Ray
actors). :class:`ProcessInferenceServer` runs the server in its own process.
"""

from torchrl.modules.inference_server._mp import MPClient, MPTransport
from torchrl.modules.inference_server._policy_client import PolicyClientModule
from torchrl.modules.inference_server._process import ProcessInferenceServer
from torchrl.modules.inference_server._ray import RayClient, RayTransport
from torchrl.modules.inference_server._server import (
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerConfig,
)
from torchrl.modules.inference_server._shared_memory import (
    SharedMemoryClient,
    SharedMemoryTransport,
)
from torchrl.modules.inference_server._threading import SlotTransport, ThreadingTransport
from torchrl.modules.inference_server._transport import (
    InferenceClient,
    InferenceTransport,
    ServerGoneError,
)

__all__ = [
    "InferenceClient",
    "InferenceDeviceConfig",
    "InferenceServer",
    "InferenceServerConfig",
    "InferenceTransport",
    "MPClient",
    "MPTransport",
    "PolicyClientModule",
    "ProcessInferenceServer",
    "RayClient",
    "RayTransport",
    "ServerGoneError",
    "SharedMemoryClient",
    "SharedMemoryTransport",
    "SlotTransport",
    "ThreadingTransport",
]
