"""Offline pretraining followed by online fine-tuning, on one SAC-style trainer."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl.trainers.algorithms._common import valid_items
from torchrl.trainers.algorithms.off_policy import SACTrainer

__all__ = ["OfflineToOnlineTrainer"]


class OfflineToOnlineTrainer(SACTrainer):
    """Pretrains on offline data, then fine-tunes online with a shrinking share of it.

    :meth:`train` first makes ``offline_steps`` gradient steps on batches sampled from
    ``replay_buffer`` (before any collection), then runs the usual off-policy loop. With an
    :class:`~torchrl.data.OfflineToOnlineReplayBuffer`, collected batches go to its online part
    and its ``offline_fraction`` decays linearly
    from its initial value to 0 over ``anneal_frames`` collected frames. With a plain buffer
    (e.g. filled by :func:`~torchrl.data.prefill_replay_buffer`), collected data is added to it.
    Collected items keep only the entries of the offline data.

    Args:
        collector: the online collector (``None``: offline only).
        replay_buffer: an ``OfflineToOnlineReplayBuffer`` or a buffer holding the offline data.

    Keyword Args:
        offline_steps: gradient steps before collection starts. Defaults to ``0``.
        anneal_frames: frames over which ``offline_fraction`` decays to 0; defaults to
            ``total_frames``; ``<= 0`` keeps it fixed.
        **kwargs: the keywords of :class:`~torchrl.trainers.algorithms.SACTrainer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> data = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = data.extend(TensorDict(x=torch.ones(100, 1), batch_size=[100]))
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> trainer = OfflineToOnlineTrainer(collector=None, total_frames=10,
        ...     optim_steps_per_batch=5, offline_steps=20, replay_buffer=data, batch_size=16,
        ...     loss_module=lambda td: TensorDict(loss_l2=((td["x"] - w) ** 2).mean()),
        ...     optimizer=torch.optim.SGD([w], lr=0.1), progress_bar=False)
        >>> trainer.train()
        >>> trainer.offline_steps_done, trainer.optim_count
        (20, 30)
    """

    #: offline steps between two log writes during pretraining.
    offline_chunk: int = 1000

    def __init__(
        self,
        *,
        replay_buffer: Any,
        offline_steps: int = 0,
        anneal_frames: int | None = None,
        **kwargs: Any,
    ) -> None:
        if replay_buffer is None:
            raise ValueError("OfflineToOnlineTrainer needs a replay_buffer holding offline data")
        if (
            isinstance(offline_steps, bool)
            or not isinstance(offline_steps, int)
            or offline_steps < 0
        ):
            raise ValueError(f"offline_steps must be an int >= 0, got {offline_steps!r}")
        super().__init__(replay_buffer=replay_buffer, **kwargs)
        self.offline_steps = offline_steps
        self.anneal_frames = self.total_frames if anneal_frames is None else int(anneal_frames)
        self.offline_steps_done = 0
        self._initial_fraction = float(getattr(replay_buffer, "offline_fraction", 0.0))
        self._offline_keys: list[Any] | None = None
        if hasattr(replay_buffer, "offline_buffer"):
            self.register_op("post_steps", self._anneal)
        self.register_module("offline_to_online", _Progress(self))

    def train(self) -> None:
        """Runs the remaining offline steps (if any), then the online loop."""
        self._pretrain()
        super().train()

    def _pretrain(self) -> None:
        saved = self.optim_steps_per_batch
        try:
            while self.offline_steps_done < self.offline_steps:
                chunk = min(self.offline_chunk, self.offline_steps - self.offline_steps_done)
                self.optim_steps_per_batch = chunk
                # The sample op ignores the (missing) collected batch.
                self.optim_steps(None)
                self.offline_steps_done += chunk
                self._log(offline_steps=self.offline_steps_done)
        finally:
            self.optim_steps_per_batch = saved

    def _process_collected(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        """Keeps the entries the offline data has: both halves of a mixed sample concatenate,
        and a plain buffer's storage accepts the online items."""
        if batch is None:
            return None
        if self._offline_keys is None:
            offline = getattr(self.replay_buffer, "offline_buffer", self.replay_buffer)
            if len(offline) == 0:
                return None
            # Indexing reads without drawing from the sampler's random stream.
            has_index = hasattr(offline, "__getitem__")
            sample = offline[torch.arange(1)] if has_index else offline.sample(1)
            self._offline_keys = list(sample.keys(include_nested=True, leaves_only=True))
        keys = batch.keys(include_nested=True, leaves_only=True)
        missing = [k for k in self._offline_keys if k not in keys]
        if missing:
            raise KeyError(
                f"OfflineToOnlineTrainer: collected batches lack the offline data's entries "
                f"{missing}"
            )
        return valid_items(batch).select(*self._offline_keys)

    def _anneal(self) -> None:
        if self.anneal_frames <= 0:
            return
        progress = min(self.collected_frames / self.anneal_frames, 1.0)
        self.replay_buffer.offline_fraction = self._initial_fraction * (1.0 - progress)


class _Progress:
    """Checkpoints the pretraining progress and the initial offline fraction."""

    def __init__(self, trainer: OfflineToOnlineTrainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {
            "offline_steps_done": self.trainer.offline_steps_done,
            "initial_fraction": self.trainer._initial_fraction,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.trainer.offline_steps_done = int(state_dict["offline_steps_done"])
        self.trainer._initial_fraction = float(state_dict["initial_fraction"])
