"""``RayReplayBuffer``, re-exported from :mod:`torchrl.data.replay_buffers.ray_buffer`.

The buffer lives in the data layer so that ``torchrl.data.RayReplayBuffer`` resolves (as in
TorchRL); collectors keep importing it from here.
"""

from __future__ import annotations

from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

__all__ = ["RayReplayBuffer"]
