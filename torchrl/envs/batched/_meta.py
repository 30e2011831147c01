"""What a batched env reads of its workers' envs: :class:`EnvMetaData`, and the stacked specs."""

from __future__ import annotations

from typing import Any

import torch

from torchrl.data.specs import Composite, stack_specs
from torchrl.envs.common import EnvBase

__all__ = ["EnvMetaData", "stack_metas"]


class EnvMetaData:
    """What a batched env needs to know of a worker's env: its batch size, device and specs.

    Read once from a built env, without stepping it; it pickles (specs hold plain tensors).

    Args:
        batch_size: the env's batch size.
        device: the env's device.
        output_spec: the env's ``output_spec`` (a copy).
        input_spec: the env's ``input_spec`` (a copy).
        allow_done_after_reset: the env's flag of the same name.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.batched import EnvMetaData
        >>> meta = EnvMetaData.from_env(PendulumEnv(batch_size=[2]))
        >>> meta.batch_size, sorted(meta.output_spec["full_observation_spec"].keys())[0]
        (torch.Size([2]), 'observation')
    """

    __slots__ = ("allow_done_after_reset", "batch_size", "device", "input_spec", "output_spec")

    def __init__(
        self,
        batch_size: torch.Size,
        device: torch.device | None,
        output_spec: Composite,
        input_spec: Composite,
        allow_done_after_reset: bool = False,
    ) -> None:
        self.batch_size = torch.Size(batch_size)
        self.device = device
        self.output_spec = output_spec
        self.input_spec = input_spec
        self.allow_done_after_reset = bool(allow_done_after_reset)

    @classmethod
    def from_env(cls, env: EnvBase) -> EnvMetaData:
        """Reads the metadata of a built env.

        Args:
            env: the env (any :class:`~torchrl.envs.EnvBase`).

        Returns:
            Its :class:`EnvMetaData`, with copies of its specs.
        """
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"create_env_fn must return a torchrl EnvBase, got a {type(env).__name__}"
            )
        return cls(
            env.batch_size,
            env.device,
            env.output_spec.clone(),
            env.input_spec.clone(),
            env.allow_done_after_reset,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"EnvMetaData(batch_size={self.batch_size}, device={self.device})"


def stack_metas(metas: list[EnvMetaData], name: str) -> tuple[Composite, Composite]:
    """The batched ``output_spec`` and ``input_spec``: the workers' specs stacked on a dim 0.

    Args:
        metas: the metadata of each worker's env.
        name: the batched env's class name, for the messages.

    Returns:
        ``(output_spec, input_spec)`` of batch ``[len(metas), *inner]``.

    Raises:
        ValueError: the workers' envs differ in batch size, device, keys, shapes, dtypes or
            spec kinds.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.batched._meta import EnvMetaData, stack_metas
        >>> meta = EnvMetaData.from_env(PendulumEnv())
        >>> output_spec, input_spec = stack_metas([meta, meta, meta], "SerialEnv")
        >>> output_spec.shape
        torch.Size([3])
    """
    n = len(metas)
    first = metas[0]
    for i, meta in enumerate(metas[1:], 1):
        if meta is first:
            continue
        if meta.batch_size != first.batch_size or meta.device != first.device:
            raise ValueError(
                f"{name}: worker {i}'s env has batch size {list(meta.batch_size)} on "
                f"{meta.device}, worker 0's {list(first.batch_size)} on {first.device}; "
                f"a batched env needs one batch size and device"
            )
        for spec_name in ("output_spec", "input_spec"):
            a, b = getattr(first, spec_name), getattr(meta, spec_name)
            keys_a = set(a.keys(True, True))
            keys_b = set(b.keys(True, True))
            if keys_a != keys_b:
                raise ValueError(
                    f"{name}: the envs of workers 0 and {i} have different keys in their "
                    f"{spec_name}: only in worker 0: {sorted(map(str, keys_a - keys_b))}, only "
                    f"in worker {i}: {sorted(map(str, keys_b - keys_a))}"
                )
            for key in keys_a:
                sa, sb = a[key], b[key]
                if sa.shape != sb.shape or sa.dtype != sb.dtype or type(sa) is not type(sb):
                    raise ValueError(
                        f"{name}: entry {key!r} differs between the envs of workers 0 and {i} "
                        f"({sa!r} vs {sb!r}); the workers' specs must share shapes, dtypes and "
                        f"kinds to be stacked"
                    )
    specs = []
    for spec_name in ("output_spec", "input_spec"):
        base = getattr(first, spec_name)
        out = base.expand(n, *base.shape)
        if any(m is not first for m in metas):
            # Specs that differ only in their values (bounds, ...) stack lazily, leaf by leaf.
            for key in base.keys(True, True):
                leaves = [getattr(m, spec_name)[key] for m in metas]
                if any(leaf != leaves[0] for leaf in leaves[1:]):
                    out[key] = stack_specs(leaves, 0)
        specs.append(out)
    return specs[0], specs[1]
