"""TorchRL's ``torchrl.modules.tensordict_module.rnn`` path; the names live in :mod:`torchrl.modules.recurrent`."""

from __future__ import annotations

from torchrl.modules.recurrent import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode

__all__ = ["GRUModule", "LSTMModule", "recurrent_mode", "set_recurrent_mode"]
