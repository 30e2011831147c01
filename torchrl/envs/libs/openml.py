"""A contextual bandit over an OpenML classification table: :class:`OpenMLEnv`.

Each sub-env shows one row of the table: its features as ``"observation"`` (float32 ``[D]``)
and its class as ``"y"`` (int64, a scalar per sub-env). The agent answers with a class index
(``"action"``, ``Categorical(num_classes)``), is rewarded ``1.0`` when it is ``"y"`` and ``0.0``
otherwise, and the episode ends: every step is ``done`` (and ``terminated``). The next reset shows
new rows.

The table is read by :class:`~torchrl.data.datasets.OpenMLExperienceReplay` (an ARFF, parquet or
CSV file on disk, converted once into a memory-mapped copy). Rows are shown in a shuffled order
without replacement: every row of the table is shown once before any row is shown again, and a new
order is drawn at each pass. The order comes from the env's own generator, which
:meth:`~torchrl.envs.EnvBase.set_seed` seeds.

``"y"`` is an observation entry, as in TorchRL (a policy must not read it). The env also keeps
the rows it shows, and rewards an action against those, not against the input's ``"y"``: a
step then needs only the action, as :class:`~torchrl.envs.SerialEnv` and
:class:`~torchrl.envs.ParallelEnv` send it (they pass actions and state entries, not
observations). A step changes no state, so a ``"_step"`` mask can skip any sub-env.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.datasets.openml import OPENML_TABLES, OpenMLExperienceReplay
from torchrl.data.specs import Categorical, Composite, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import ClassProperty

__all__ = ["OpenMLEnv"]

LABEL = "y"
"""Key of the class of the row a sub-env shows (an observation entry, int64)."""


def _available_envs(cls: type) -> list[str]:
    return list(OPENML_TABLES)


class OpenMLEnv(EnvBase):
    """A contextual bandit over the rows of an OpenML classification table.

    Every reset shows each sub-env a row: ``"observation"`` (float32 ``[*B, D]``, the row's
    features) and ``"y"`` (int64 ``[*B]``, its class). A step takes ``"action"`` (int64 ``[*B]``,
    a class index) and returns ``("next", "reward")`` ``1.0`` where it equals ``"y"``, else
    ``0.0`` (float32 ``[*B, 1]``), with ``done`` and ``terminated`` set: an episode is one step.
    The env rewards the rows it showed (the input's ``"y"`` is not read).
    Rows are drawn without replacement from a shuffled order (a new one per pass over the table),
    from a generator seeded by :meth:`set_seed`. The table is found, converted and cached by
    :class:`~torchrl.data.datasets.OpenMLExperienceReplay` (see ``docs/offline_data.rst``).

    Args:
        dataset_name: ``"adult_num"``, ``"adult_onehot"``, ``"mushroom_num"``,
            ``"mushroom_onehot"``, ``"covertype"``, ``"shuttle"``, ``"magic"``
            (:attr:`available_envs`), or any name with ``data_file``.
        device: where the env's tensors live.
        batch_size: the env's batch shape (default ``[]``: one row at a time).
        root: the reader's cache directory (default ``$TORCHRL_DATASETS_ROOT/openml``).
        data_file: the table (``.arff``, ``.parquet``/``.pq``, ``.csv``, or an OpenML cache
            folder); default ``<root>/raw/<table>.<ext>``.
        target: the class column (default: declared beside the file, documented, or ``"class"``).
        encoding: ``"ordinal"`` or ``"onehot"`` for categorical features (default: the
            dataset's, ``"ordinal"`` for other names).
        download: fetch a missing table with the ``openml`` package (``pip install openml``), as
            TorchRL's env fetches it; a table already on disk is never fetched.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import os, tempfile
        >>> from torchrl.envs.libs.openml import OpenMLEnv
        >>> folder = tempfile.mkdtemp()
        >>> path = os.path.join(folder, "toy.csv")
        >>> _ = open(path, "w").write("x,color,class\\n1.5,red,a\\n2.0,blue,b\\n0.5,red,a\\n")
        >>> env = OpenMLEnv("toy", batch_size=[2], data_file=path, root=folder)
        >>> td = env.reset()
        >>> td["observation"].shape, td["y"].shape, env.action_spec.n
        (torch.Size([2, 2]), torch.Size([2]), 2)
        >>> td["action"] = td["y"]  # the right class
        >>> env.step(td)["next", "reward"].squeeze(-1), env.step(td)["next", "done"].all()
        (tensor([1., 1.]), tensor(True))
    """

    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        dataset_name: str,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        *,
        root: str | Path | None = None,
        data_file: str | Path | None = None,
        target: str | None = None,
        encoding: Literal["ordinal", "onehot"] | None = None,
        download: bool = True,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.dataset_name = dataset_name
        self._dataset = OpenMLExperienceReplay(
            dataset_name,
            root=root,
            data_file=data_file,
            target=target,
            encoding=encoding,
            download=bool(download),
        )
        rows = self._dataset.storage.get(slice(None))
        # the converted copy is memory-mapped: indexing it reads only the rows drawn
        self._features: torch.Tensor = rows.get("X")
        self._labels: torch.Tensor = rows.get(LABEL)
        self._num_rows = int(self._labels.shape[0])
        if self._num_rows == 0:
            raise ValueError(f"OpenMLEnv: the table of {dataset_name!r} has no row")
        self._rng = torch.Generator()
        self._rng.manual_seed(int(torch.randint(0, 2**62, (), dtype=torch.int64)))
        self._order = torch.randperm(self._num_rows, generator=self._rng)
        self._cursor = 0
        # the rows the sub-envs show (features and classes), on the CPU
        self._shown_features = torch.zeros(*self.batch_size, self._features.shape[-1])
        self._shown_labels = torch.zeros(self.batch_size, dtype=torch.int64)
        self._make_specs()

    @property
    def dataset(self) -> OpenMLExperienceReplay:
        """The reader holding the table (its ``metadata`` names the classes and features)."""
        return self._dataset

    @property
    def num_classes(self) -> int:
        """Number of classes, i.e. of actions."""
        return self._dataset.num_classes

    def _make_specs(self) -> None:
        batch, device = self.batch_size, self.device
        num_features = int(self._features.shape[-1])
        self.observation_spec = Composite(
            {
                OBSERVATION: Unbounded(
                    shape=(*batch, num_features), dtype=torch.float32, device=device
                ),
                LABEL: Categorical(self.num_classes, shape=batch, dtype=torch.int64, device=device),
            },
            shape=batch,
            device=device,
        )
        self.action_spec = Categorical(
            self.num_classes, shape=batch, dtype=torch.int64, device=device
        )
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)

    def _draw(self, count: int) -> torch.Tensor:
        """The indices of the next ``count`` rows of the shuffled order (reshuffled per pass)."""
        parts = []
        while count > 0:
            if self._cursor == self._num_rows:
                self._order = torch.randperm(self._num_rows, generator=self._rng)
                self._cursor = 0
            take = min(count, self._num_rows - self._cursor)
            parts.append(self._order[self._cursor : self._cursor + take])
            self._cursor += take
            count -= take
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size
        size = math.prod(batch)
        mask = tensordict.get(RESET, None) if tensordict is not None else None
        features = self._shown_features.view(size, -1)
        labels = self._shown_labels.view(size)
        if mask is None:
            index = self._draw(size)
            features.copy_(self._features[index])
            labels.copy_(self._labels[index])
        else:
            # only the reset sub-envs consume rows; the others keep theirs
            wanted = mask.reshape(size).cpu()
            index = self._draw(int(wanted.sum()))
            features[wanted] = self._features[index]
            labels[wanted] = self._labels[index]
        flags = torch.zeros(*batch, 1, dtype=torch.bool)
        return TensorDict(
            {
                OBSERVATION: self._shown_features.clone(),
                LABEL: self._shown_labels.clone(),
                DONE: flags,
                TERMINATED: flags.clone(),
                TRUNCATED: flags.clone(),
            },
            batch_size=batch,
        ).to(self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(ACTION)
        if action.shape != self._shown_labels.shape:
            raise ValueError(
                f"OpenMLEnv.step: {ACTION!r} has shape {list(action.shape)}, expected "
                f"{list(self._shown_labels.shape)} (one class index per sub-env)"
            )
        labels = self._shown_labels
        reward = (action.to(labels.device) == labels).to(torch.float32).unsqueeze(-1)
        done = torch.ones_like(reward, dtype=torch.bool)
        return TensorDict(
            {
                OBSERVATION: self._shown_features.clone(),
                LABEL: labels.clone(),
                REWARD: reward,
                DONE: done,
                TERMINATED: done.clone(),
                TRUNCATED: torch.zeros_like(done),
            },
            batch_size=self.batch_size,
        ).to(self.device)

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        # a step changes no state, so stepping every sub-env is exact; EnvBase.step then
        # restores the skipped ones
        return self._step(tensordict)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        self._rng.manual_seed(int(seed))
        self._order = torch.randperm(self._num_rows, generator=self._rng)
        self._cursor = 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset_name={self.dataset_name!r}, rows={self._num_rows}, "
            f"num_classes={self.num_classes}, batch_size={list(self.batch_size)}, "
            f"device={self.device})"
        )
