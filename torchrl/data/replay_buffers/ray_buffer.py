"""``RayReplayBuffer``: one replay buffer hosted in a Ray actor, shared by collectors and trainer.

(Moved here from ``torchrl.collectors.distributed.replay``, which re-exports it, so that it
resolves at ``torchrl.data`` as in TorchRL without the data layer importing the collectors.)

The object users hold is a small client: it forwards every call to the actor and waits for
the answer. It pickles to another client of the same actor, so remote collector workers can
extend the buffer (give it as ``collector_kwargs={"replay_buffer": rb}``) while the trainer
samples from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchrl._types import IndexLike, ReplayBufferLike
from torchrl._utils import import_optional, start_local_ray
from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from torchrl.data.replay_buffers.utils import Index

__all__ = ["RayReplayBuffer"]


class _BufferHost:
    """The actor body: builds the buffer in the actor process and serves calls to it."""

    def __init__(
        self, cls: Callable[..., ReplayBufferLike], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        import torch

        torch.set_num_threads(1)
        self.buffer = cls(*args, **kwargs)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.buffer, name)(*args, **kwargs)

    def length(self) -> int:
        return len(self.buffer)


class RayReplayBuffer:
    """A replay buffer living in a Ray actor, with the local buffer's API.

    ``RayReplayBuffer(storage=..., sampler=..., batch_size=...)`` builds
    ``replay_buffer_cls(...)`` inside an actor; :meth:`extend`, :meth:`add`, :meth:`sample`,
    :meth:`update_priority`, ``len()``, :meth:`empty`, :meth:`state_dict`,
    :meth:`load_state_dict`, :meth:`dumps` and :meth:`loads` run there. Copies of this object
    (pickled into Ray actors or tasks) talk to the same actor; only the one that created it
    kills the actor on :meth:`shutdown`. Ray is started locally if it is not running yet (see
    :class:`~torchrl.collectors.distributed.RayCollector` for what it then listens on). It is
    also importable as ``torchrl.collectors.distributed.RayReplayBuffer``.

    Args:
        *args: positional arguments of ``replay_buffer_cls``.
        replay_buffer_cls: the buffer class to host (default
            :class:`~torchrl.data.ReplayBuffer`).
            Parts given as constructors (``storage=functools.partial(LazyTensorStorage, 100)``)
            are built in the actor.
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        remote_config: actor options (``num_cpus``, ``memory``, ...).
        timeout: seconds to wait for any answer of the actor.
        **kwargs: keyword arguments of ``replay_buffer_cls``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import RayReplayBuffer
        >>> from torchrl.data import LazyTensorStorage
        >>> rb = RayReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)  # doctest: +SKIP
        >>> _ = rb.extend(TensorDict(obs=torch.arange(10), batch_size=[10]))  # doctest: +SKIP
        >>> len(rb), rb.sample().shape  # doctest: +SKIP
        (10, torch.Size([4]))
        >>> rb.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        *args: Any,
        replay_buffer_cls: Callable[..., ReplayBufferLike] | None = None,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        ray = import_optional("ray", "ray")
        if replay_buffer_cls is None:
            replay_buffer_cls = ReplayBuffer
        if not ray.is_initialized():
            start_local_ray(ray, dict(ray_init_config or {}), type(self).__name__)
        self.timeout = float(timeout)
        options = {"num_cpus": 0, **(remote_config or {})}
        self._actor = (
            ray.remote(_BufferHost).options(**options).remote(replay_buffer_cls, args, kwargs)
        )
        self._owner = True
        self._get(self._actor.length.remote())  # fail here when the buffer cannot be built

    def _get(self, ref: Any) -> Any:
        ray = import_optional("ray", "ray")
        ready, _ = ray.wait([ref], timeout=self.timeout)
        if not ready:
            raise TimeoutError(f"RayReplayBuffer: no answer within {self.timeout:.0f} s")
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"RayReplayBuffer: the buffer's actor died: {err}") from err

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._get(self._actor.call.remote(name, *args, **kwargs))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_owner"] = False
        return state

    # ------------------------------------------------------------------------------ the API
    def extend(self, data: Any) -> Index:
        """Writes a batch of items; returns their indices."""
        return self._call("extend", data)

    def add(self, data: Any) -> int | Index | None:
        """Writes one item; returns its index."""
        return self._call("add", data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch (see the hosted buffer's ``sample``)."""
        return self._call("sample", batch_size, return_info=return_info)

    def update_priority(self, index: IndexLike, priority: float | torch.Tensor) -> None:
        """Updates the priorities of sampled items."""
        self._call("update_priority", index, priority)

    def empty(self) -> None:
        """Empties the buffer."""
        self._call("empty")

    def state_dict(self) -> dict[str, Any]:
        """The hosted buffer's state dict."""
        return self._call("state_dict")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state dict into the hosted buffer."""
        self._call("load_state_dict", state_dict)

    def dumps(self, path: str | Path) -> None:
        """Saves the buffer to ``path`` (on the actor's machine)."""
        self._call("dumps", path)

    def loads(self, path: str | Path) -> None:
        """Loads the buffer from ``path`` (on the actor's machine)."""
        self._call("loads", path)

    def __len__(self) -> int:
        return int(self._get(self._actor.length.remote()))

    def shutdown(self) -> None:
        """Kills the actor (only from the client that created it)."""
        if self._owner and self._actor is not None:
            ray = import_optional("ray", "ray")
            ray.kill(self._actor, no_restart=True)
            self._actor = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(owner={self._owner})"
