import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def _filled(n: int, max_size: int | None = None) -> LazyTensorStorage:
    storage = LazyTensorStorage(max_size or n)
    storage.set(torch.arange(n), torch.arange(n))
    return storage


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    stat = float(((counts - expected) ** 2 / expected).sum())
    dof = len(counts) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(stat / 2.0)))


class TestRandomSampler:
    def test_uniform(self):
        storage = _filled(5, max_size=10)
        index, info = RandomSampler().sample(storage, 50_000)
        assert info == {} and int(index.max()) < 5
        counts = np.bincount(index.numpy(), minlength=5)
        assert _chi2_pvalue(counts, np.full(5, 0.2)) > 1e-3

    def test_empty_storage(self):
        with pytest.raises(RuntimeError, match="empty replay buffer"):
            RandomSampler().sample(LazyTensorStorage(4), 2)

    def test_generator(self):
        storage = _filled(100)
        a, b = RandomSampler(), RandomSampler()
        a._generator = torch.Generator().manual_seed(3)
        b._generator = torch.Generator().manual_seed(3)
        assert torch.equal(a.sample(storage, 8)[0], b.sample(storage, 8)[0])


class TestSamplerWithoutReplacement:
    def test_epoch_covers_every_item_once(self):
        storage = _filled(10)
        sampler = SamplerWithoutReplacement()
        seen = []
        while True:
            index, _ = sampler.sample(storage, 3)
            seen.extend(index.tolist())
            if sampler.ran_out:
                break
        assert sorted(seen) == list(range(10))
        # The next call starts a new epoch.
        sampler.sample(storage, 3)
        assert not sampler.ran_out

    def test_drop_last(self):
        storage = _filled(10)
        sampler = SamplerWithoutReplacement(drop_last=True)
        sizes = []
        for _ in range(3):
            sizes.append(sampler.sample(storage, 4)[0].numel())
        assert sizes == [4, 4, 4]
        with pytest.raises(ValueError, match="batch_size=11 is larger than the 10 stored"):
            sampler.sample(storage, 11)

    def test_new_epoch_when_storage_grows(self):
        storage = _filled(4, max_size=8)
        sampler = SamplerWithoutReplacement(shuffle=False)
        sampler.sample(storage, 3)
        storage.set(torch.arange(4, 8), torch.arange(4))
        assert sampler.sample(storage, 3)[0].tolist() == [0, 1, 2]

    def test_state_dict(self):
        storage = _filled(10)
        sampler = SamplerWithoutReplacement()
        sampler.sample(storage, 3)
        clone = SamplerWithoutReplacement()
        clone.load_state_dict(sampler.state_dict())
        assert torch.equal(clone.sample(storage, 3)[0], sampler.sample(storage, 3)[0])


class TestPrioritizedSampler:
    PRIORITIES = np.array([0.1, 0.5, 1.0, 2.0, 3.0, 0.05, 4.0, 0.7])

    def _sampler(
        self, alpha: float, beta: float = 0.4
    ) -> tuple[PrioritizedSampler, LazyTensorStorage]:
        n = len(self.PRIORITIES)
        storage = _filled(n, max_size=16)
        sampler = PrioritizedSampler(16, alpha=alpha, beta=beta, eps=0.0)
        sampler.extend(torch.arange(n))
        sampler.update_priority(torch.arange(n), torch.tensor(self.PRIORITIES))
        return sampler, storage

    @pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
    def test_frequencies_match_chi_square(self, alpha):
        sampler, storage = self._sampler(alpha)
        sampler._generator = torch.Generator().manual_seed(1234)
        counts = np.zeros(len(self.PRIORITIES))
        for _ in range(20):
            index, _ = sampler.sample(storage, 10_000)
            counts += np.bincount(index.numpy(), minlength=len(counts))
        probs = self.PRIORITIES**alpha / (self.PRIORITIES**alpha).sum()
        assert _chi2_pvalue(counts, probs) > 1e-3
        # Sanity check of the test itself: a wrong alpha is rejected.
        wrong = self.PRIORITIES ** (alpha + 0.3) / (self.PRIORITIES ** (alpha + 0.3)).sum()
        assert _chi2_pvalue(counts, wrong) < 1e-6

    def test_importance_weights_formula(self):
        alpha, beta = 0.7, 0.4
        sampler, storage = self._sampler(alpha, beta)
        index, info = sampler.sample(storage, 64)
        n = len(self.PRIORITIES)
        probs = self.PRIORITIES**alpha / (self.PRIORITIES**alpha).sum()
        weights = (n * probs) ** -beta
        expected = weights[index.numpy()] / weights.max()
        np.testing.assert_allclose(info["_weight"].numpy(), expected, rtol=1e-5)

    def test_new_items_get_max_priority_seen(self):
        storage = _filled(3, max_size=4)
        sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
        sampler.extend(torch.arange(2))
        assert sampler.default_priority == 1.0
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 0.5]))
        sampler.extend(torch.tensor([2]))
        assert sampler._sum_tree[2] == pytest.approx(5.0)
        sampler.update_priority(torch.tensor([0]), torch.tensor([0.1]))
        assert sampler.default_priority == 5.0  # the largest seen, not the largest stored
        del storage

    @pytest.mark.parametrize(
        "priority, match",
        [
            (torch.tensor([1.0, -1.0]), "finite and non-negative; got -1.0 at position 1"),
            (torch.tensor([float("nan"), 1.0]), "got nan at position 0"),
            (torch.tensor([float("inf"), 1.0]), "got inf"),
            (torch.tensor([1.0, 2.0, 3.0]), "2 indices but priorities of shape"),
        ],
    )
    def test_bad_priority_changes_nothing(self, priority, match):
        sampler, _ = self._sampler(0.7)
        before = sampler.state_dict()
        with pytest.raises(ValueError, match=match):
            sampler.update_priority(torch.tensor([0, 1]), priority)
        after = sampler.state_dict()
        assert torch.equal(before["sum_tree"]["values"], after["sum_tree"]["values"])
        assert after["max_priority"] == before["max_priority"]

    def test_index_out_of_capacity(self):
        sampler, _ = self._sampler(0.7)
        with pytest.raises(IndexError, match="index 16 is out of range for a sampler of capacity"):
            sampler.update_priority(torch.tensor([16]), 1.0)

    def test_reduction_and_scalar(self):
        sampler, _ = self._sampler(1.0)
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([[1.0, 3.0], [2.0, 0.5]]))
        assert sampler._sum_tree[[0, 1]].tolist() == [3.0, 2.0]
        sampler.update_priority(torch.tensor([0, 1]), 0.25)
        assert sampler._sum_tree[[0, 1]].tolist() == [0.25, 0.25]

    def test_zero_priority_never_sampled(self):
        sampler, storage = self._sampler(1.0)
        sampler.update_priority(torch.arange(8), torch.tensor([0, 0, 0, 1.0, 0, 0, 0, 0]))
        index, info = sampler.sample(storage, 100)
        assert set(index.tolist()) == {3} and torch.allclose(info["_weight"], torch.ones(100))

    def test_all_zero_raises(self):
        sampler, storage = self._sampler(1.0)
        sampler.update_priority(torch.arange(8), 0.0)
        with pytest.raises(RuntimeError, match="priority 0"):
            sampler.sample(storage, 4)

    def test_state_dict_and_empty(self):
        sampler, storage = self._sampler(0.7)
        clone = PrioritizedSampler(16, alpha=0.1, beta=0.1)
        clone.load_state_dict(sampler.state_dict())
        assert clone.alpha == 0.7
        g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        sampler._generator, clone._generator = g1, g2
        assert torch.equal(sampler.sample(storage, 32)[0], clone.sample(storage, 32)[0])
        sampler._empty()
        assert sampler._sum_tree.total() == 0 and sampler.default_priority == 1.0

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="max_capacity"):
            PrioritizedSampler(0, 0.5, 0.5)
        with pytest.raises(ValueError, match="alpha"):
            PrioritizedSampler(4, -1.0, 0.5)
        with pytest.raises(ValueError, match="reduction"):
            PrioritizedSampler(4, 0.5, 0.5, reduction="prod")

    def test_ndim2_storage(self):
        storage = LazyTensorStorage(10, ndim=2)
        storage.set(torch.arange(3), torch.zeros(2, 3))
        sampler = PrioritizedSampler(10, alpha=1.0, beta=1.0, eps=0.0)
        flat = storage._index_to_flat(storage._item_index(torch.arange(3))).reshape(-1)
        sampler.extend(flat)
        sampler.update_priority(
            torch.tensor([[0, 0], [1, 2]]), torch.tensor([0.0, 3.0]), storage=storage
        )
        (rows, cols), _ = sampler.sample(storage, 2000)
        pairs = list(zip(rows.tolist(), cols.tolist()))
        assert (0, 0) not in pairs  # priority 0
        assert set(pairs) == {(0, 1), (0, 2), (1, 0), (1, 1), (1, 2)}
        share = pairs.count((1, 2)) / len(pairs)
        assert 0.35 < share < 0.50  # 3 / (4 * 1 + 3)


# ---------------------------------------------------------------------------------------------
# Slice samplers
# ---------------------------------------------------------------------------------------------


def _episodes(lengths: list[int]) -> TensorDict:
    """Back-to-back episodes of the given lengths, with a global step counter."""
    n = sum(lengths)
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    episode = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    return TensorDict(
        {"step": torch.arange(n), "episode": episode, ("next", "done"): done}, batch_size=[n]
    )


def _split(index_or_steps: torch.Tensor, is_last: torch.Tensor) -> list[list[int]]:
    out, current = [], []
    for value, last in zip(index_or_steps.tolist(), is_last.tolist()):
        current.append(value)
        if last:
            out.append(current)
            current = []
    assert not current
    return out


class TestSliceSampler:
    def test_slices_inside_episodes(self):
        storage = LazyTensorStorage(30)
        storage.set(torch.arange(30), _episodes([5, 10, 15]))
        sampler = SliceSampler(num_slices=4)
        for _ in range(20):
            index, info = sampler.sample(storage, 24)
            slices = index.view(4, 6)
            assert ((slices.diff(dim=1)) == 1).all()
            # Only the 10- and 15-step episodes hold 6 steps.
            assert (slices[:, 0] >= 5).all()
            episode = storage.get(index)["episode"].view(4, 6)
            assert (episode == episode[:, :1]).all()
            assert info[("next", "truncated")].view(4, 6)[:, -1].all()

    def test_traj_key(self):
        storage = LazyTensorStorage(30)
        data = _episodes([5, 10, 15]).exclude("next")
        storage.set(torch.arange(30), data)
        sampler = SliceSampler(slice_len=5, traj_key="episode")
        index, _ = sampler.sample(storage, 50)
        episode = storage.get(index)["episode"].view(10, 5)
        assert (episode == episode[:, :1]).all()

    def test_no_long_trajectory(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(10), _episodes([5, 5]))
        with pytest.raises(ValueError, match="no stored trajectory has at least slice_len=6"):
            SliceSampler(slice_len=6).sample(storage, 12)
        index, info = SliceSampler(slice_len=6, strict_length=False).sample(storage, 12)
        assert index.numel() == 10  # two slices of 5

    def test_pad(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(10), _episodes([3, 7]))
        rb = TensorDictReplayBuffer(
            storage=storage,
            sampler=SliceSampler(slice_len=5, strict_length=False, pad=-1),
            batch_size=20,
        )
        sample = rb.sample()
        assert sample.batch_size == torch.Size([20])
        mask = sample["mask"].view(4, 5)
        steps = sample["step"].view(4, 5)
        assert (steps[~mask] == -1).all() and (steps[mask] >= 0).all()

    def test_batch_size_divisibility(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(10), _episodes([10]))
        with pytest.raises(ValueError, match="not divisible by num_slices=3"):
            SliceSampler(num_slices=3).sample(storage, 10)
        with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
            SliceSampler(num_slices=2, slice_len=2)

    def test_cache_follows_writes(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(10), _episodes([10]))
        sampler = SliceSampler(slice_len=5, cache_values=True)
        sampler.sample(storage, 5)
        storage.set(torch.arange(10), _episodes([2, 2, 2, 2, 2]))  # no 5-step episode now
        with pytest.raises(ValueError, match="no stored trajectory"):
            sampler.sample(storage, 5)

    def test_wraps_around_the_ring(self):
        storage = LazyTensorStorage(10)
        rb = TensorDictReplayBuffer(
            storage=storage, sampler=SliceSampler(slice_len=6), batch_size=6
        )
        rb.extend(_episodes([14]).exclude("episode"))  # keeps steps 4..13, slots 4..9 then 0..3
        steps = {tuple(rb.sample()["step"].tolist()) for _ in range(30)}
        assert all(list(s) == list(range(s[0], s[0] + 6)) for s in steps)
        assert any(s[0] <= 9 < s[-1] for s in steps)  # some slices wrap from slot 9 to slot 0

    def test_postprocess_marks_ends(self):
        storage = LazyTensorStorage(12)
        rb = TensorDictReplayBuffer(
            storage=storage, sampler=SliceSampler(slice_len=4), batch_size=8
        )
        rb.extend(_episodes([12]))
        sample = rb.sample()
        assert sample["next", "truncated"].view(2, 4)[:, -1].all()
        assert sample["next", "done"].view(2, 4)[:, -1].all()
        assert not sample["next", "done"].view(2, 4)[:, :-1].any()

    def test_precomputed_ends_and_trajectories(self):
        storage = LazyTensorStorage(12)
        data = _episodes([4, 8])
        storage.set(torch.arange(12), data.exclude("next"))  # no done flags stored
        by_ends = SliceSampler(slice_len=6, ends=data["next", "done"].squeeze(-1))
        by_ids = SliceSampler(slice_len=6, trajectories=data["episode"])
        for sampler in (by_ends, by_ids):
            index, _ = sampler.sample(storage, 12)
            assert (index >= 4).all() and (index.view(2, 6).diff(dim=1) == 1).all()
        with pytest.raises(ValueError, match="exclusive"):
            SliceSampler(slice_len=2, ends=data["next", "done"], trajectories=data["episode"])

    def test_list_storage(self):
        storage = ListStorage(20)
        storage.set(torch.arange(10), _episodes([4, 6]))
        index, _ = SliceSampler(slice_len=3).sample(storage, 6)
        assert (index.view(2, 3).diff(dim=1) == 1).all()


@settings(max_examples=80, deadline=None)
@given(
    ndim=st.sampled_from([1, 2]),
    n_rows=st.integers(1, 3),
    slots=st.integers(3, 25),
    chunks=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    done_prob=st.floats(0.0, 0.5),
    slice_len=st.integers(1, 6),
    num_slices=st.integers(1, 4),
    strict=st.booleans(),
    mode=st.sampled_from(["end_key", "traj_key"]),
    span=st.sampled_from([False, True, 1, (0, 2)]),
    pad=st.sampled_from([None, -7]),
    seed=st.integers(0, 2**16),
)
def test_slices_never_cross_boundaries(
    ndim, n_rows, slots, chunks, done_prob, slice_len, num_slices, strict, mode, span, pad, seed
):
    """Property: every slice is consecutive steps of one row and one trajectory."""
    if ndim == 1:
        n_rows = 1
    gen = torch.Generator().manual_seed(seed)
    kwargs = {"end_key": "d"} if mode == "end_key" else {"traj_key": "traj"}
    sampler = SliceSampler(slice_len=slice_len, strict_length=strict, span=span, pad=pad, **kwargs)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(n_rows * slots, ndim=ndim), sampler=sampler, generator=gen
    )
    step = 0
    traj_counter = torch.zeros(n_rows, dtype=torch.long)
    for length in chunks:
        done = torch.rand(n_rows, length, generator=gen) < done_prob
        traj = traj_counter[:, None] + torch.cumsum(done.long(), 1) - done.long()
        traj_counter = traj[:, -1] + done[:, -1].long()
        data = TensorDict(
            {
                "step": torch.arange(step, step + length).expand(n_rows, length).clone(),
                "row": torch.arange(n_rows)[:, None].expand(n_rows, length).clone(),
                "d": done[..., None],
                "d_raw": done[..., None].clone(),
                "traj": traj + 1000 * torch.arange(n_rows)[:, None],
            },
            batch_size=[n_rows, length],
        )
        rb.extend(data if ndim == 2 else data[0])
        step += length
    batch = num_slices * slice_len
    try:
        sample, info = rb.sample(batch, return_info=True)
    except ValueError as err:
        assert "no stored trajectory" in str(err) and strict
        return
    is_last = info[("next", "truncated")]
    mask = sample.get("mask", None)
    if pad is not None and mask is not None:
        assert sample.batch_size[0] == batch
        keep = mask
    else:
        keep = torch.ones(sample.batch_size[0], dtype=torch.bool)
    steps = sample["step"][keep]
    rows = sample["row"][keep]
    done = sample["d_raw"][keep].squeeze(-1)
    trajs = sample["traj"][keep]
    ends = is_last[keep]
    start = 0
    n_slices = 0
    for k in range(ends.numel()):
        if not ends[k]:
            continue
        sl = slice(start, k + 1)
        assert (rows[sl] == rows[start]).all()
        assert torch.equal(
            steps[sl], torch.arange(int(steps[start]), int(steps[start]) + k + 1 - start)
        )
        assert (trajs[sl] == trajs[start]).all()
        if mode == "end_key":
            assert not done[start:k].any()  # a done may only close the slice
        if strict and span is False:
            assert k + 1 - start == slice_len
        start = k + 1
        n_slices += 1
    assert start == ends.numel() and n_slices == num_slices


class TestSliceSamplerWithoutReplacement:
    def test_epoch_never_repeats_items(self):
        storage = LazyTensorStorage(40)
        storage.set(torch.arange(40), _episodes([10, 13, 17]))
        sampler = SliceSamplerWithoutReplacement(slice_len=4)
        seen = []
        for _ in range(100):
            index, _ = sampler.sample(storage, 8)
            seen.extend(index.tolist())
            episode = storage.get(index)["episode"].view(-1, 4)
            assert (episode == episode[:, :1]).all()
            if sampler.ran_out:
                break
        assert sampler.ran_out
        assert len(seen) == len(set(seen)) == 4 * (2 + 3 + 4)

    def test_drop_last(self):
        storage = LazyTensorStorage(8)
        storage.set(torch.arange(8), _episodes([8]))
        sampler = SliceSamplerWithoutReplacement(slice_len=2, drop_last=True)
        with pytest.raises(ValueError, match="only 4 windows"):
            sampler.sample(storage, 10)
        assert sampler.sample(storage, 6)[0].numel() == 6
        assert sampler.ran_out

    def test_restarts_after_write(self):
        storage = LazyTensorStorage(8)
        storage.set(torch.arange(8), _episodes([8]))
        sampler = SliceSamplerWithoutReplacement(slice_len=2, shuffle=False)
        assert sampler.sample(storage, 4)[0].tolist() == [0, 1, 2, 3]
        sampler.extend(torch.arange(2))
        assert sampler.sample(storage, 4)[0].tolist() == [0, 1, 2, 3]

    def test_state_dict(self):
        storage = LazyTensorStorage(40)
        storage.set(torch.arange(40), _episodes([40]))
        sampler = SliceSamplerWithoutReplacement(slice_len=4)
        sampler.sample(storage, 8)
        clone = SliceSamplerWithoutReplacement(slice_len=4)
        clone.load_state_dict(sampler.state_dict())
        assert torch.equal(clone.sample(storage, 8)[0], sampler.sample(storage, 8)[0])


class TestPrioritizedSliceSampler:
    def _setup(self) -> tuple[PrioritizedSliceSampler, LazyTensorStorage]:
        storage = LazyTensorStorage(30)
        storage.set(torch.arange(30), _episodes([3, 20, 7]))
        sampler = PrioritizedSliceSampler(30, alpha=1.0, beta=0.5, eps=0.0, slice_len=4)
        sampler.extend(torch.arange(30))
        return sampler, storage

    def test_slice_starts_at_drawn_item(self):
        sampler, storage = self._setup()
        priority = torch.zeros(30)
        priority[10] = 1.0
        sampler.update_priority(torch.arange(30), priority)
        index, info = sampler.sample(storage, 12)
        assert index.view(3, 4).tolist() == [[10, 11, 12, 13]] * 3
        assert info["_weight"].shape == torch.Size([12])

    def test_slice_moved_back_to_fit(self):
        sampler, storage = self._setup()
        priority = torch.zeros(30)
        priority[21] = 1.0  # 2 items before the end of the 20-step episode (3..22)
        sampler.update_priority(torch.arange(30), priority)
        index, _ = sampler.sample(storage, 4)
        assert index.tolist() == [19, 20, 21, 22]

    def test_short_trajectories_redrawn(self):
        sampler, storage = self._setup()
        priority = torch.ones(30)
        priority[:3] = 100.0  # the 3-step episode is too short for slices of 4
        sampler.update_priority(torch.arange(30), priority)
        index, _ = sampler.sample(storage, 40)
        assert (index >= 3).all()

    def test_beta_and_state(self):
        sampler, storage = self._setup()
        sampler.beta = 0.9
        clone = PrioritizedSliceSampler(30, alpha=0.5, beta=0.1, slice_len=4)
        clone.load_state_dict(sampler.state_dict())
        assert clone.beta == 0.9 and clone.alpha == 1.0


def test_slice_samplers_on_ndim2_storage():
    storage = LazyTensorStorage(40, ndim=2)
    data = _episodes([20, 20]).reshape(2, 20)
    data["next", "done"][:, 9] = True  # each row: two episodes of 10
    storage.set(torch.arange(20), data)
    without = SliceSamplerWithoutReplacement(slice_len=5)
    seen = []
    while True:
        (rows, cols), _ = without.sample(storage, 10)
        seen += list(zip(rows.tolist(), cols.tolist()))
        assert ((cols.view(-1, 5) // 10) == (cols.view(-1, 5)[:, :1] // 10)).all()
        assert (rows.view(-1, 5) == rows.view(-1, 5)[:, :1]).all()
        if without.ran_out:
            break
    assert len(seen) == len(set(seen)) == 40
    prio = PrioritizedSliceSampler(40, alpha=1.0, beta=1.0, eps=0.0, slice_len=4)
    prio.extend(torch.arange(40))
    priority = torch.zeros(2, 20)
    priority[1, 8] = 1.0  # two steps before the end of row 1's first episode
    prio.update_priority(torch.arange(40), priority.reshape(-1))
    (rows, cols), info = prio.sample(storage, 8)
    assert rows.tolist() == [1] * 8 and cols.tolist() == [6, 7, 8, 9] * 2
