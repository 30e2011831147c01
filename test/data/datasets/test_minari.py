"""MinariExperienceReplay and export_minari on small Minari datasets made in the test."""

from __future__ import annotations

import importlib.util
import json
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("minari")
h5py = pytest.importorskip("h5py")

import minari  # noqa: E402
from minari.data_collector import EpisodeBuffer  # noqa: E402

from torchrl.data.datasets import minari_data  # noqa: E402
from torchrl.data.datasets.common import (  # noqa: E402
    DatasetFormatError,
    DatasetNotFoundError,
    default_root,
    ted_from_arrays,
)
from torchrl.data.datasets.minari_data import (  # noqa: E402
    MinariExperienceReplay,
    export_minari,
    minari_dataset_path,
    space_to_spec,
)
from torchrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer  # noqa: E402
from torchrl.data.replay_buffers.query import trajectory_bounds  # noqa: E402
from torchrl.data.specs import (  # noqa: E402
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    Unbounded,
)

# Minari asks for provenance (author, permalink, ...) it does not need; the tests leave it out.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`.*` is set to None:UserWarning"),
    pytest.mark.filterwarnings("ignore:env_spec is None:UserWarning"),
]

_has_jax = importlib.util.find_spec("jax") is not None  # minari's DataCollector needs it


@pytest.fixture
def stores(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "torchrl"))
    return tmp_path


class DictObsEnv(gym.Env):
    """Episodes of 4-6 steps with a nested Dict observation and a numeric info entry."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32),
                "goal": gym.spaces.Discrete(3),
                "inner": gym.spaces.Dict(
                    {"vel": gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float64)}
                ),
            }
        )
        self.action_space = gym.spaces.Discrete(4)
        self._t = 0
        self._horizon = 5

    def _obs(self):
        return {
            "pos": np.array([self._t, -self._t], dtype=np.float32),
            "goal": self._t % 3,
            "inner": {"vel": np.array([0.5 * self._t])},
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._horizon = int(self.np_random.integers(4, 7))
        return self._obs(), {"count": 0}

    def step(self, action):
        self._t += 1
        terminated = self._t >= self._horizon
        return self._obs(), float(action), terminated, False, {"count": self._t}


def _random_episodes(env, n_episodes, seed):
    """Episode buffers from random actions (what minari's DataCollector records)."""
    env.action_space.seed(seed)
    out = []
    for ep in range(n_episodes):
        obs, info = env.reset(seed=seed + ep)
        obs_list, acts, rews, terms, truncs, infos = [obs], [], [], [], [], [info]
        while True:
            act = env.action_space.sample()
            obs, rew, term, trunc, info = env.step(act)
            obs_list.append(obs)
            acts.append(act)
            rews.append(rew)
            terms.append(term)
            truncs.append(trunc)
            infos.append(info)
            if term or trunc:
                break
        out.append((obs_list, acts, rews, terms, truncs, infos))
    return out


def _stack(values):
    if isinstance(values[0], dict):
        return {k: _stack([v[k] for v in values]) for k in values[0]}
    return np.stack([np.asarray(v) for v in values])


def make_with_buffers(env, dataset_id, n_episodes, seed=0):
    """A Minari dataset written by minari's create_dataset_from_buffers."""
    buffers = [
        EpisodeBuffer(
            observations=_stack(o),
            actions=_stack(a),
            rewards=np.asarray(r, dtype=np.float64),
            terminations=np.asarray(te),
            truncations=np.asarray(tr),
            infos=_stack(i) if i[0] else None,
        )
        for o, a, r, te, tr, i in _random_episodes(env, n_episodes, seed)
    ]
    return minari.create_dataset_from_buffers(dataset_id, buffers, env=env, algorithm_name="random")


def make_with_collector(env, dataset_id, n_episodes, seed=0):
    """A Minari dataset recorded by minari's own DataCollector wrapper."""
    collector = minari.DataCollector(env, record_infos=True)
    collector.action_space.seed(seed)
    collector.reset(seed=seed)
    done_episodes = 0
    while done_episodes < n_episodes:
        _, _, term, trunc, _ = collector.step(collector.action_space.sample())
        if term or trunc:
            done_episodes += 1
            if done_episodes < n_episodes:
                collector.reset()
    dataset = collector.create_dataset(dataset_id, algorithm_name="random")
    collector.close()
    return dataset


MAKERS = [
    pytest.param(make_with_buffers, id="buffers"),
    pytest.param(
        make_with_collector,
        id="DataCollector",
        marks=pytest.mark.skipif(not _has_jax, reason='DataCollector needs "minari[create]" (jax)'),
    ),
]


def _as_tensor(x):
    if isinstance(x, dict):
        return {k: _as_tensor(v) for k, v in x.items()}
    return torch.as_tensor(np.asarray(x))


def _assert_equal_tree(ours, theirs):
    if isinstance(theirs, dict):
        assert set(ours.keys()) == set(theirs)
        for k, v in theirs.items():
            _assert_equal_tree(ours[k], v)
    else:
        torch.testing.assert_close(ours, _as_tensor(theirs).to(ours.dtype), rtol=0, atol=0)


def assert_matches_minari(data, dataset):
    """Every transition of ``data`` equals minari's episodes, boundaries and flags included."""
    episodes = list(dataset.iterate_episodes())
    lengths = [len(ep.rewards) for ep in episodes]
    assert data.shape[0] == sum(lengths) == dataset.total_steps
    bounds = trajectory_bounds(data, "episode")
    assert (bounds[:, 1] - bounds[:, 0]).tolist() == lengths
    for (start, stop), ep in zip(bounds.tolist(), episodes):
        part = data[start:stop]
        assert (part["episode"] == ep.id).all()
        obs = ep.observations
        _assert_equal_tree(part["observation"], _cut(obs, slice(None, -1)))
        _assert_equal_tree(part["next", "observation"], _cut(obs, slice(1, None)))
        _assert_equal_tree(part["action"], ep.actions)
        rew = torch.as_tensor(ep.rewards, dtype=torch.float32).unsqueeze(-1)
        torch.testing.assert_close(part["next", "reward"], rew)
        term = torch.as_tensor(ep.terminations).unsqueeze(-1)
        trunc = torch.as_tensor(ep.truncations).unsqueeze(-1)
        assert (part["next", "terminated"] == term).all()
        assert (part["next", "truncated"] == trunc).all()
        assert (part["next", "done"] == (term | trunc)).all()
        assert not part["done"].any()


def _cut(obs, index):
    if isinstance(obs, dict):
        return {k: _cut(v, index) for k, v in obs.items()}
    return obs[index]


# -- (a) minari-made datasets ------------------------------------------------------------------
@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize(
    "env_id,max_steps,obs_spec_type,action_spec",
    [
        ("CartPole-v1", None, Unbounded, Categorical(2)),
        ("Pendulum-v1", 15, Bounded, Bounded(-2.0, 2.0, shape=(1,))),
    ],
)
def test_reads_minari_dataset(stores, maker, env_id, max_steps, obs_spec_type, action_spec):
    env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    dataset_id = f"{env_id.split('-')[0].lower()}/random-v0"
    dataset = maker(env, dataset_id, n_episodes=3)
    data = MinariExperienceReplay(dataset_id, batch_size=8)
    assert_matches_minari(data[:], minari.load_dataset(dataset_id))
    if max_steps:  # Pendulum never terminates: every episode ends truncated
        assert int(data[:]["next", "truncated"].sum()) == 3
    specs = data.specs
    assert isinstance(specs["observation"], obs_spec_type)
    assert specs["action"] == action_spec
    assert specs["next", "observation"] == specs["observation"]
    assert specs["observation"].is_in(data[:]["observation"][0])
    meta = data.metadata
    assert meta["total_steps"] == dataset.total_steps
    assert meta["total_episodes"] == 3
    assert json.loads(meta["env_spec"])["id"] == env_id
    sample = data.sample()
    assert sample.batch_size == torch.Size([8])
    assert sample["next", "done"].shape == (8, 1)


def test_split_trajs(stores):
    make_with_buffers(gym.make("CartPole-v1"), "cartpole/split-v0", n_episodes=3)
    reader = MinariExperienceReplay("cartpole/split-v0")
    flat = reader[:]
    assert (reader._convert() == flat).all()  # the in-memory conversion agrees with the chunked one
    split = MinariExperienceReplay("cartpole/split-v0", split_trajs=True)
    assert len(split) == 3
    lengths = split[:]["mask"].sum(-1).tolist()
    assert lengths == (trajectory_bounds(flat, "episode").diff(dim=1).squeeze(-1)).tolist()


# -- (b) ours -> Minari -> reader --------------------------------------------------------------
def _assert_round_trip(original, read, one_hot_action=False):
    assert read.shape == original.shape
    for key in [
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "truncated"),
    ]:
        ours = original[key]
        theirs = read[key]
        if key == "action" and one_hot_action:
            ours = ours.long().argmax(-1)
        if not isinstance(ours, torch.Tensor):
            assert (ours == theirs).all(), key
        else:
            torch.testing.assert_close(theirs, ours.to(theirs.dtype).reshape(theirs.shape))


def test_export_collector_data_round_trip(stores):
    from torchrl.collectors import Collector
    from torchrl.envs.libs.gym import GymEnv

    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    collector = Collector(env, policy=None, frames_per_batch=300, total_frames=300)
    batch = next(iter(collector))
    collector.shutdown()
    dataset = export_minari(batch, "cartpole/ours-v0", env_id="CartPole-v1", author="tests")
    assert dataset.total_steps == 300
    traj_ids = batch["collector", "traj_ids"]
    assert dataset.total_episodes == len(torch.unique(traj_ids))
    reader = MinariExperienceReplay("cartpole/ours-v0")
    assert (reader.data_path / ".complete").exists()  # a memory-mapped copy on disk
    read = reader[:]
    _assert_round_trip(batch, read, one_hot_action=True)
    ours_bounds = trajectory_bounds(batch, ("collector", "traj_ids"))
    assert torch.equal(trajectory_bounds(read, "episode"), ours_bounds)
    # the last trajectory was cut by the batch: it stays unfinished, nothing is invented
    assert read["next", "done"][-1].item() == batch["next", "done"][-1].item()
    metadata = minari.load_dataset("cartpole/ours-v0").storage.metadata
    assert json.loads(metadata["env_spec"])["id"] == "CartPole-v1"
    assert metadata["author"] == {"tests"}


def _ted_episodes(lengths, obs_dim=3, seed=0, last_unfinished=False):
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for i, n in enumerate(lengths):
        obs = torch.randn(n + 1, obs_dim, generator=gen)
        term = torch.zeros(n, dtype=torch.bool)
        trunc = torch.zeros(n, dtype=torch.bool)
        if not (last_unfinished and i == len(lengths) - 1):
            (term if i % 2 else trunc)[-1] = True
        parts.append(
            ted_from_arrays(
                obs[:-1],
                torch.randn(n, 2, generator=gen),
                torch.randn(n, generator=gen),
                term,
                trunc,
                obs[1:],
                episode=torch.full((n,), 10 + i),
            )
        )
    return torch.cat(parts)


def test_export_batched_rows_split_at_row_ends(stores):
    # [2, T] (two envs' rows, no trajectory ids): a row's unfinished trajectory must not merge
    # with the next row's first one.
    rows = torch.stack(
        [_ted_episodes([4, 6], seed=1, last_unfinished=True), _ted_episodes([7, 3], seed=2)]
    )
    del rows["episode"]
    export_minari(rows, "toy/rows-v0")
    read = MinariExperienceReplay("toy/rows-v0")[:]
    _assert_round_trip(rows.reshape(-1), read)
    assert trajectory_bounds(read, "episode").tolist() == [[0, 4], [4, 10], [10, 17], [17, 20]]
    assert not read["next", "done"][9]


def test_export_wrapped_replay_buffer_in_time_order(stores):
    data = _ted_episodes([5, 4, 6, 5])  # 20 transitions
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(15))
    rb.extend(data)  # the first 5 transitions were overwritten
    export_minari(rb, "toy/rb-v0")
    read = MinariExperienceReplay("toy/rb-v0")[:]
    _assert_round_trip(data[5:], read)
    assert trajectory_bounds(read, "episode").tolist() == [[0, 4], [4, 10], [10, 15]]


def test_export_in_chunks_and_infer_spaces(stores):
    data = _ted_episodes([3, 5, 2, 4, 6])
    dataset = export_minari(data, "toy/chunks-v0", chunk_steps=4)
    assert dataset.total_episodes == 5
    assert isinstance(dataset.observation_space, gym.spaces.Box)
    read = MinariExperienceReplay("toy/chunks-v0")
    _assert_round_trip(data, read[:])
    assert isinstance(read.specs["action"], Unbounded)


# -- (c) nested observations -------------------------------------------------------------------
@pytest.mark.parametrize("maker", MAKERS)
def test_dict_observations_stay_nested(stores, maker):
    env = DictObsEnv()
    dataset = maker(env, "dictenv/random-v0", n_episodes=3)
    reader = MinariExperienceReplay("dictenv/random-v0", batch_size=5)
    data = reader[:]
    assert_matches_minari(data, minari.load_dataset("dictenv/random-v0"))
    assert set(data["observation"].keys()) == {"pos", "goal", "inner"}
    assert data["observation", "inner", "vel"].shape == (dataset.total_steps, 1)
    assert data["next", "observation", "pos"].dtype == torch.float32
    # the info recorded at each step, after the step
    assert torch.equal(
        data["next", "info", "count"], data["next", "observation", "pos"][:, 0].long()
    )
    assert torch.equal(data["info", "count"], data["observation", "pos"][:, 0].long())
    specs = reader.specs
    assert isinstance(specs["observation"], Composite)
    assert specs["observation", "goal"] == Categorical(3)
    assert isinstance(specs["observation", "inner", "vel"], Unbounded)
    assert specs["observation"].is_in(data["observation"][0])
    assert reader.sample()["observation", "pos"].shape == (5, 2)
    # and back: nested data -> Minari (Dict space inferred) -> reader
    export_minari(data, "dictenv/copy-v0")
    again = MinariExperienceReplay("dictenv/copy-v0")[:]
    _assert_round_trip(data, again)
    assert torch.equal(again["next", "info", "count"], data["next", "info", "count"])
    assert torch.equal(trajectory_bounds(again, "episode"), trajectory_bounds(data, "episode"))


def test_tuple_observations(stores):
    space = gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, shape=(2,)), gym.spaces.MultiBinary(3)))
    n = 4
    buffer = EpisodeBuffer(
        observations=(np.random.rand(n + 1, 2).astype(np.float32), np.ones((n + 1, 3), np.int8)),
        actions=np.array([0, 1, 2, 1]),
        rewards=np.ones(n),
        terminations=np.array([0, 0, 0, 1], dtype=bool),
        truncations=np.zeros(n, dtype=bool),
    )
    minari.create_dataset_from_buffers(
        "toy/tuple-v0",
        [buffer],
        observation_space=space,
        action_space=gym.spaces.Discrete(3),
    )
    reader = MinariExperienceReplay("toy/tuple-v0")
    data = reader[:]
    assert set(data["observation"].keys()) == {"0", "1"}
    assert torch.equal(data["observation", "1"], torch.ones(n, 3, dtype=torch.int8))
    assert reader.specs["observation", "1"] == Binary(3)
    export_minari(data, "toy/tuple-copy-v0", observation_space=space)
    _assert_round_trip(data, MinariExperienceReplay("toy/tuple-copy-v0")[:])


def test_space_to_spec():
    assert space_to_spec(gym.spaces.MultiDiscrete([2, 5])) == MultiCategorical([2, 5])
    assert space_to_spec(gym.spaces.MultiBinary(4)) == Binary(4)
    shifted = space_to_spec(gym.spaces.Discrete(3, start=-1))
    assert isinstance(shifted, Bounded) and shifted.is_in(torch.tensor(-1))
    assert isinstance(space_to_spec(gym.spaces.Box(0, 1, shape=(2, 2))), Bounded)
    with pytest.raises(TypeError, match="Text"):
        space_to_spec(gym.spaces.Text(5))


# -- (d) errors -----------------------------------------------------------------------------------
def test_missing_dataset_message(stores):
    with pytest.raises(DatasetNotFoundError) as info:
        MinariExperienceReplay("nowhere/missing-v0")
    message = str(info.value)
    for part in (
        "nowhere/missing-v0",
        "MINARI_DATASETS_PATH",
        str(minari_dataset_path("nowhere/missing-v0") / "data"),
        "minari download nowhere/missing-v0",
        "export_minari",
        "'minari'",
    ):
        assert part in message


def test_download_only_when_asked(stores, monkeypatch):
    calls = []

    def fake_download(dataset_id, force_download=False):
        calls.append(dataset_id)
        export_minari(_ted_episodes([3, 4]), dataset_id)

    monkeypatch.setattr(minari, "download_dataset", fake_download)
    with pytest.raises(DatasetNotFoundError):
        MinariExperienceReplay("remote/data-v0")
    assert calls == []
    data = MinariExperienceReplay("remote/data-v0", download=True)
    assert calls == ["remote/data-v0"] and len(data) == 7

    def failing_download(dataset_id, force_download=False):
        raise ConnectionError("no network")

    monkeypatch.setattr(minari, "download_dataset", failing_download)
    with pytest.raises(DatasetNotFoundError, match="no network"):
        MinariExperienceReplay("remote/other-v0", download=True)


def test_load_from_local_minari_false_ignores_local_store(stores):
    export_minari(_ted_episodes([3]), "toy/local-v0")
    with pytest.raises(DatasetNotFoundError, match="load_from_local_minari=False"):
        MinariExperienceReplay("toy/local-v0", load_from_local_minari=False)


def test_missing_minari_package(stores, monkeypatch):
    export_minari(_ted_episodes([3]), "toy/nopkg-v0")
    monkeypatch.setattr(minari_data, "_has_minari", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[offline\]"'):
        MinariExperienceReplay("toy/nopkg-v0")
    with pytest.raises(ImportError, match="torchrl\\[offline\\]"):
        export_minari(_ted_episodes([3]), "toy/nopkg2-v0")


@pytest.fixture
def small_dataset(stores):
    export_minari(_ted_episodes([3, 4, 5]), "toy/broken-v0")
    return minari_dataset_path("toy/broken-v0") / "data"


def _edit_hdf5(data_dir, edit):
    with h5py.File(data_dir / "main_data.hdf5", "a") as f:
        edit(f)


def test_corrupted_hdf5(small_dataset):
    (small_dataset / "main_data.hdf5").write_bytes(b"not an hdf5 file" * 10)
    with pytest.raises(DatasetFormatError, match=r"main_data\.hdf5: not a readable HDF5"):
        MinariExperienceReplay("toy/broken-v0")


def test_truncated_hdf5(small_dataset):
    path = small_dataset / "main_data.hdf5"
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(DatasetFormatError, match=r"main_data\.hdf5"):
        MinariExperienceReplay("toy/broken-v0")


def test_missing_hdf5(small_dataset):
    (small_dataset / "main_data.hdf5").unlink()
    with pytest.raises(DatasetFormatError, match=r"main_data\.hdf5: missing"):
        MinariExperienceReplay("toy/broken-v0")


def test_missing_metadata(small_dataset):
    (small_dataset / "metadata.json").unlink()
    with pytest.raises(DatasetFormatError, match=r"metadata\.json: missing"):
        MinariExperienceReplay("toy/broken-v0")


def test_bad_metadata(small_dataset):
    meta_file = small_dataset / "metadata.json"
    meta = json.loads(meta_file.read_text())
    meta["total_steps"] = 100
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(DatasetFormatError, match="'total_steps' is 100, the episodes hold 12"):
        MinariExperienceReplay("toy/broken-v0")
    del meta["total_episodes"]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(DatasetFormatError, match="'total_episodes' must be a int"):
        MinariExperienceReplay("toy/broken-v0")
    meta_file.write_text("{not json")
    with pytest.raises(DatasetFormatError, match="not readable JSON"):
        MinariExperienceReplay("toy/broken-v0")


def test_missing_episode_key(small_dataset):
    _edit_hdf5(small_dataset, lambda f: f["episode_1"].__delitem__("rewards"))
    with pytest.raises(DatasetFormatError, match="key 'episode_1/rewards' is missing"):
        MinariExperienceReplay("toy/broken-v0")


def test_wrong_observation_shape(small_dataset):
    def edit(f):
        del f["episode_2/observations"]
        f["episode_2"].create_dataset("observations", data=np.zeros((6, 2), np.float32))

    _edit_hdf5(small_dataset, edit)
    with pytest.raises(DatasetFormatError) as info:
        MinariExperienceReplay("toy/broken-v0")
    message = str(info.value)
    assert "main_data.hdf5" in message and "episode_2/observations" in message
    assert "expected shape [6, 3]" in message and "got [6, 2]" in message


def test_wrong_flag_length(small_dataset):
    def edit(f):
        del f["episode_0/terminations"]
        f["episode_0"].create_dataset("terminations", data=np.zeros(5, bool))

    _edit_hdf5(small_dataset, edit)
    with pytest.raises(DatasetFormatError, match=r"episode_0/terminations: expected shape \[3\]"):
        MinariExperienceReplay("toy/broken-v0")


def test_failed_conversion_leaves_no_copy(small_dataset):
    (small_dataset / "main_data.hdf5").write_bytes(b"junk")
    reader_root = default_root("minari") / "toy" / "broken-v0"
    with pytest.raises(DatasetFormatError):
        MinariExperienceReplay("toy/broken-v0")
    assert not (reader_root / "flat").exists()


def test_export_errors(stores):
    data = _ted_episodes([3, 4])
    with pytest.raises(KeyError, match="data has no .*pixels.* entry"):
        export_minari(data, "toy/err-v0", observation_key="pixels")
    with pytest.raises(ValueError, match=r"observation has shape \[3\] per step.*expects \[4\]"):
        export_minari(data, "toy/err-v0", env_id="CartPole-v1")
    assert not minari_dataset_path("toy/err-v0").exists()  # a failed export leaves nothing
    export_minari(data, "toy/err-v0")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_minari(data, "toy/err-v0")
    export_minari(data[:3], "toy/err-v0", overwrite=True)
    assert minari.load_dataset("toy/err-v0").total_steps == 3
    with pytest.raises(TypeError, match="TensorDict or a replay buffer"):
        export_minari({"observation": 1}, "toy/err2-v0")


# -- (e) reopen ------------------------------------------------------------------------------------
def test_reopen_is_fast_and_does_not_reconvert(stores, monkeypatch):
    make_with_buffers(gym.make("CartPole-v1"), "cartpole/reopen-v0", n_episodes=4)
    first = MinariExperienceReplay("cartpole/reopen-v0")
    before = first[:].clone()

    def no_minari(*args, **kwargs):
        raise AssertionError("minari was used on reopen")

    monkeypatch.setattr(minari, "load_dataset", no_minari)
    minari.delete_dataset("cartpole/reopen-v0")  # the raw data is not needed any more
    start = time.perf_counter()
    again = MinariExperienceReplay("cartpole/reopen-v0")
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed
    assert (again[:] == before).all()
    assert again.metadata["total_steps"] == len(before)


def test_changed_source_or_force_converts_again(stores, monkeypatch):
    export_minari(_ted_episodes([3, 4]), "toy/force-v0")
    assert len(MinariExperienceReplay("toy/force-v0")) == 7
    export_minari(_ted_episodes([5]), "toy/force-v0", overwrite=True)
    assert len(MinariExperienceReplay("toy/force-v0")) == 5  # the stale copy was dropped
    calls = []
    real_load = minari.load_dataset
    monkeypatch.setattr(
        minari, "load_dataset", lambda *a, **k: calls.append(a) or real_load(*a, **k)
    )
    assert len(MinariExperienceReplay("toy/force-v0")) == 5 and calls == []
    assert len(MinariExperienceReplay("toy/force-v0", download="force")) == 5 and calls


def test_registry_loads_minari(stores):
    from torchrl.data.datasets.registry import load_dataset

    export_minari(_ted_episodes([2, 3]), "toy/registry-v0")
    data = load_dataset("minari/toy/registry-v0", batch_size=2)
    assert isinstance(data, MinariExperienceReplay) and len(data) == 5


def test_export_writes_step_infos(stores):
    data = _ted_episodes([2, 2])
    data["next", "info"] = TensorDict({"x": torch.arange(4.0)}, batch_size=[4])
    export_minari(data, "toy/info-v0")
    read = MinariExperienceReplay("toy/info-v0")[:]
    assert torch.equal(read["next", "info", "x"], torch.arange(4.0))
    assert "info" not in read.keys()  # only per-step infos were written
