"""Transforms that move data between devices: ``DeviceCastTransform`` and ``PinMemoryTransform``.

Moving never changes a dtype. Without CUDA, only CPU and ``meta`` devices exist; pinning memory
then does nothing (pinned memory is a CUDA driver feature).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from torchrl._types import DeviceLike, NestedKey
from torchrl.data.specs import Composite
from torchrl.envs.transforms.base import Transform

__all__ = ["DeviceCastTransform", "PinMemoryTransform"]


def _device(value: DeviceLike | None) -> torch.device | None:
    if value is None:
        return None
    if isinstance(value, int):
        return torch.device("cuda", value)
    return torch.device(value)


class DeviceCastTransform(Transform):
    """Moves data to ``device`` on the way out of an env (or buffer), and inputs back to
    ``orig_device`` on the way in.

    Without keys, the whole TensorDict (and every spec) moves and the env's device becomes
    ``device``; with ``in_keys`` / ``in_keys_inv``, only those entries move (their specs too).
    Dtypes are kept.

    Args:
        device: the device outside the env or buffer.
        orig_device: the device inside (default: the parent env's device when there is one).
        in_keys: the entries moved on the way out (default: everything).
        out_keys: where they are written (default: ``in_keys``).
        in_keys_inv: the base env's input entries moved back by the inverse pass.
        out_keys_inv: the names of those inputs outside (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import DeviceCastTransform
        >>> td = TensorDict(obs=torch.ones(2, dtype=torch.float64), batch_size=[2], device="cpu")
        >>> out = DeviceCastTransform("meta")(td)
        >>> out.device, out["obs"].dtype
        (device(type='meta'), torch.float64)
    """

    def __init__(
        self,
        device: DeviceLike,
        orig_device: DeviceLike | None = None,
        *,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if device is None:
            raise ValueError("DeviceCastTransform needs a destination device")
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        self.device = _device(device)
        self._orig_device = _device(orig_device)
        self._whole = not self._in_keys and not self._in_keys_inv

    @property
    def orig_device(self) -> torch.device | None:
        """The device inside the env or buffer (the parent env's, unless given)."""
        if self._orig_device is not None:
            return self._orig_device
        parent = self.parent
        return None if parent is None else parent.device

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.device)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        orig = self.orig_device
        return value if orig is None else value.to(orig)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._whole:
            return next_tensordict.to(self.device)
        return super()._call(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self._whole:
            return tensordict_reset.to(self.device)
        return self._call_tolerant(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._whole:
            orig = self.orig_device
            return tensordict if orig is None else tensordict.to(orig)
        return super()._inv_call(tensordict)

    def _uses_inv(self) -> bool:
        return self._whole or bool(self._inv_pairs)

    def _uses_reset(self) -> bool:
        return True

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        return self.device if self._whole else device

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self._whole:
            return output_spec.to(self.device)
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            sub = output_spec[name]
            for in_key, out_key in self._pairs:
                if in_key in sub:
                    sub[out_key] = sub[in_key].to(self.device)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        if self._whole:
            return input_spec.to(self.device)
        for name in ("full_state_spec", "full_action_spec"):
            sub = input_spec[name]
            for in_key, out_key in self._inv_pairs:
                if in_key in sub:
                    leaf = sub[in_key]
                    if out_key != in_key:
                        del sub[in_key]
                    sub[out_key] = leaf.to(self.device)
        return input_spec

    def extra_repr(self) -> str:
        keys = super().extra_repr()
        return f"device={self.device}, orig_device={self._orig_device}" + (
            f", {keys}" if keys else ""
        )


class PinMemoryTransform(Transform):
    """Pins the memory of the TensorDicts that come out of an env or buffer (faster copies to a
    CUDA device).

    Pinned memory needs CUDA: when ``torch.cuda.is_available()`` is ``False``, the transform
    does nothing (the data is returned as it came), so that the same code runs on CPU-only
    machines.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import PinMemoryTransform
        >>> td = PinMemoryTransform()(TensorDict(obs=torch.ones(2), batch_size=[2]))
        >>> td["obs"].is_pinned() == torch.cuda.is_available()
        True
    """

    def __init__(self) -> None:
        super().__init__()

    def _pin(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not torch.cuda.is_available():
            return tensordict
        return tensordict.pin_memory()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._pin(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._pin(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._pin(tensordict)

    def extra_repr(self) -> str:
        return f"active={torch.cuda.is_available()}"
