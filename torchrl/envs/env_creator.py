"""``EnvCreator``: an env constructor that knows its env's specs and travels to other processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchrl.envs.batched._meta import EnvMetaData
from torchrl.envs.common import EnvBase

__all__ = ["EnvCreator"]


class EnvCreator:
    """Wraps an env constructor: builds the env once here to read its specs, then builds copies.

    Batched envs read the specs from :attr:`meta_data` instead of building an env of their own.
    With ``share_memory=True``, the buffers the first env registers (``env.named_buffers()``,
    e.g. a transform's running statistics) are moved to shared memory and every env built by the
    creator, in this process or in a worker, uses those same tensors.

    An ``EnvCreator`` pickles with the standard ``pickle`` (no cloudpickle) when
    ``create_env_fn`` and the kwargs do: a top-level function or class, or a
    ``functools.partial`` of one, not a lambda or a local function. That matters only for
    workers started with ``"spawn"`` or ``"forkserver"``; forked workers need no pickling.

    Args:
        create_env_fn: a callable returning a torchrl env.
        create_env_kwargs: its keyword arguments.
        share_memory: share the env's buffers between every env built (see above).
        **kwargs: more keyword arguments of ``create_env_fn`` (merged into
            ``create_env_kwargs``).

    Examples:
        >>> import pickle
        >>> from torchrl.envs import EnvCreator, GymEnv, ParallelEnv
        >>> creator = EnvCreator(GymEnv, env_name="CartPole-v1")
        >>> creator.meta_data.batch_size
        torch.Size([])
        >>> env = pickle.loads(pickle.dumps(creator))()
        >>> env.reset()["observation"].shape
        torch.Size([4])
        >>> penv = ParallelEnv(2, creator)  # no env built to read the specs
        >>> penv.observation_spec["observation"].shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        create_env_fn: Callable[..., EnvBase],
        create_env_kwargs: dict[str, Any] | None = None,
        share_memory: bool = True,
        **kwargs: Any,
    ) -> None:
        if not callable(create_env_fn):
            raise TypeError(f"EnvCreator: create_env_fn must be callable, got {create_env_fn!r}")
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = {**(create_env_kwargs or {}), **kwargs}
        self.share_memory = bool(share_memory)
        env = create_env_fn(**self.create_env_kwargs)
        self._meta = EnvMetaData.from_env(env)
        self._shared: dict[str, torch.Tensor] = {}
        if self.share_memory:
            for name, buffer in env.named_buffers():
                if buffer.device.type == "cpu":
                    self._shared[name] = buffer.share_memory_()
        env.close()

    @property
    def meta_data(self) -> EnvMetaData:
        """The batch size, device and specs of the env, read when the creator was made."""
        return self._meta

    def __call__(self, **kwargs: Any) -> EnvBase:
        """Builds an env.

        Args:
            **kwargs: keyword arguments overriding those given at construction.

        Returns:
            The env, using the shared buffers (with ``share_memory=True``).
        """
        env = self.create_env_fn(**{**self.create_env_kwargs, **kwargs})
        if self._shared:
            _attach_buffers(env, self._shared)
        return env

    def __repr__(self) -> str:
        fn = getattr(self.create_env_fn, "__name__", None) or repr(self.create_env_fn)
        return f"EnvCreator({fn}, kwargs={self.create_env_kwargs})"


def _attach_buffers(env: EnvBase, shared: dict[str, torch.Tensor]) -> None:
    """Points the env's buffers to the shared tensors of the same name, shape and dtype."""
    for name, tensor in shared.items():
        owner_name, _, leaf = name.rpartition(".")
        try:
            owner = env.get_submodule(owner_name) if owner_name else env
        except AttributeError:
            continue
        current = owner._buffers.get(leaf)
        if current is None or current.shape != tensor.shape or current.dtype != tensor.dtype:
            continue
        persistent = leaf not in owner._non_persistent_buffers_set
        owner.register_buffer(leaf, tensor, persistent=persistent)
