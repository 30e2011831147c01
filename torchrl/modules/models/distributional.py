"""The log-softmax layer of distributional (C51) Q-networks, as a tensordict module."""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import ACTION_VALUE
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import key_list, module_keys

__all__ = ["DistributionalDQNnet"]


class DistributionalDQNnet(TensorDictModuleBase):
    """Turns the logits of a distributional Q-network into log-probabilities over the atoms.

    A distributional Q-network writes ``[*B, n_atoms, n_actions]`` logits; this module applies
    ``log_softmax`` over the atoms (dim ``-2``), which is what
    :class:`~torchrl.modules.DistributionalQValueModule` and the distributional DQN loss read.

    Args:
        in_keys: entries read (default ``["action_value"]``).
        out_keys: entries written, one per input (default: ``in_keys``, in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> net = DistributionalDQNnet()
        >>> td = net(TensorDict(action_value=torch.randn(10, 51, 4), batch_size=[10]))
        >>> td["action_value"].shape, bool(td["action_value"].exp().sum(-2).allclose(torch.ones(10, 4)))
        (torch.Size([10, 51, 4]), True)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        keys_in = key_list(ACTION_VALUE if in_keys is None else in_keys)
        keys_out = keys_in if out_keys is None else key_list(out_keys)
        if len(keys_in) != len(keys_out):
            raise ValueError(
                f"DistributionalDQNnet: in_keys {keys_in} and out_keys {keys_out} differ in length"
            )
        self.in_keys = module_keys(keys_in)
        self.out_keys = module_keys(keys_out)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            logits = tensordict.get(in_key)
            if logits.ndim < 2:
                raise ValueError(
                    f"DistributionalDQNnet: {in_key!r} must be [*B, n_atoms, n_actions], got "
                    f"shape {tuple(logits.shape)}"
                )
            tensordict.set(out_key, logits.log_softmax(-2))
        return tensordict
