"""D4RLExperienceReplay (reading D4RL HDF5 files) and export_d4rl (writing them)."""

from __future__ import annotations

import io
import shutil

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from torchrl.data.datasets import (
    DatasetFormatError,
    DatasetNotFoundError,
    ted_from_arrays,
)
from torchrl.data.datasets import d4rl as d4rl_module
from torchrl.data.datasets.d4rl import D4RL_DATASET_URLS, D4RLExperienceReplay, export_d4rl
from torchrl.data.replay_buffers.query import trajectory_bounds
from torchrl.data.specs import Bounded


@pytest.fixture(autouse=True)
def _isolated_root(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl_home"))


def _ted(terminated, truncated, *, obs_dim=3, seed=0):
    """TED transitions whose trajectories end where the flags say (the data may stop mid-way)."""
    g = torch.Generator().manual_seed(seed)
    n = len(terminated)
    obs = torch.randn(n, obs_dim, generator=g)
    td = ted_from_arrays(
        obs,
        torch.randn(n, 2, generator=g),
        torch.randn(n, generator=g),
        torch.tensor(terminated),
        torch.tensor(truncated),
        torch.randn(n, obs_dim, generator=g),
    )
    td["info"] = TensorDict(
        {"qpos": torch.randn(n, 4, generator=g), "deep": {"x": torch.arange(n)}}, [n]
    )
    td["step_count"] = torch.arange(n).unsqueeze(-1)
    return td


# trajectories: terminated (3 steps), cut by a time limit (4), terminated (2), unfinished (3)
TERM = [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
TRUNC = [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]


def _write_raw(path, n=10, *, obs_dim=3, next_obs=False, drop=(), override=None, seed=0):
    """A D4RL-layout file written directly with h5py, as the d4rl package ships them."""
    rng = np.random.default_rng(seed)
    terminals = np.zeros(n, bool)
    timeouts = np.zeros(n, bool)
    terminals[3 % n] = True
    timeouts[6 % n] = True
    columns = {
        "observations": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "actions": rng.standard_normal((n, 2)).astype(np.float32),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminals": terminals,
        "timeouts": timeouts,
    }
    if next_obs:
        columns["next_observations"] = rng.standard_normal((n, obs_dim)).astype(np.float32)
    columns.update(override or {})
    with h5py.File(path, "w") as f:
        for name, value in columns.items():
            if name not in drop:
                f[name] = value
    return columns


def _open(path, root, **kwargs):
    return D4RLExperienceReplay("ds", data_file=path, root=root, **kwargs)


def _all(rb):
    return rb[:]


# -- round trips ---------------------------------------------------------------------------------
def test_round_trip_values_dones_and_trajectories(tmp_path):
    td = _ted(TERM, TRUNC)
    path = export_d4rl(td, tmp_path / "data.hdf5")
    out = _all(_open(path, tmp_path / "root"))
    for key in [
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "truncated"),
        "episode",
        ("info", "qpos"),
        ("info", "deep", "x"),
    ]:
        assert torch.equal(out[key], td[key]), key
    # entries outside "info" keep their path under it
    assert torch.equal(out["info", "step_count"], td["step_count"])
    assert torch.equal(trajectory_bounds(out), trajectory_bounds(td))
    assert out["episode"].tolist() == [0] * 3 + [1] * 4 + [2] * 2 + [3] * 3
    assert not out["next", "done"][-1].item()  # the unfinished last trajectory stays unfinished


def test_export_writes_the_d4rl_layout(tmp_path):
    td = _ted(TERM, TRUNC)
    path = export_d4rl(td, tmp_path / "data.hdf5")
    assert path == tmp_path / "data.hdf5"
    with h5py.File(path) as f:
        assert f["observations"].shape == (12, 3)
        assert f["rewards"].shape == (12,)
        assert f["terminals"].dtype == np.bool_
        assert f["terminals"][:].astype(int).tolist() == TERM
        assert f["timeouts"][:].astype(int).tolist() == TRUNC
        assert "next_observations" in f and "infos/qpos" in f and "infos/deep/x" in f
        assert f["metadata/torchrl_version"][()].decode()
        assert "observation" in f["metadata/keys"][()].decode()
    assert not list(tmp_path.glob(".*tmp*"))  # written under a temporary name, then renamed


def test_round_trip_batched_envs(tmp_path):
    # [B=2, T=5] from two envs, nothing done: each env's row is one trajectory
    td = _ted([0] * 10, [0] * 10).reshape(2, 5)
    path = export_d4rl(td, tmp_path / "b.hdf5")
    out = _all(_open(path, tmp_path / "root"))
    assert out["episode"].tolist() == [0] * 5 + [1] * 5
    # the cut between the envs becomes a timeout; the data's last row is left unfinished
    assert out["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [4]
    assert torch.equal(out["observation"], td["observation"].reshape(10, 3))


def test_round_trip_replay_buffer_in_insertion_order(tmp_path):
    td = _ted([0] * 12, [0] * 12)
    td["traj_ids"] = torch.tensor([0] * 5 + [1] * 7)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(td[:6])
    rb.extend(td[6:])  # the ring wrapped: rows 4..11 are left, oldest at the cursor
    path = export_d4rl(rb, tmp_path / "rb.hdf5")
    out = _all(_open(path, tmp_path / "root"))
    assert torch.equal(out["observation"], td["observation"][4:])
    # the trajectory id change (row 4 -> 5) is a boundary in the file
    assert out["episode"].tolist() == [0] + [1] * 7
    assert out["next", "truncated"].squeeze(-1).tolist() == [True] + [False] * 7


# -- reading files made elsewhere ------------------------------------------------------------------
def test_without_next_observations(tmp_path):
    cols = _write_raw(tmp_path / "raw.hdf5", n=10)
    out = _all(_open(tmp_path / "raw.hdf5", tmp_path / "root"))
    obs = torch.from_numpy(cols["observations"])
    # within a trajectory, the next observation is the following row's
    for i in [0, 1, 2, 4, 5, 7, 8]:
        assert torch.equal(out["next", "observation"][i], obs[i + 1])
    # at trajectory ends it is unknown: zeroed, and the file's last row is marked truncated
    for i in [3, 6, 9]:
        assert not out["next", "observation"][i].any()
    assert out["next", "terminated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3]
    assert out["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [6, 9]
    assert out["episode"].tolist() == [0] * 4 + [1] * 3 + [2] * 3
    assert torch.equal(out["observation"], obs)
    assert torch.equal(out["next", "reward"].squeeze(-1), torch.from_numpy(cols["rewards"]))


def test_terminal_and_timeout_on_one_row(tmp_path):
    terminals = np.zeros(6, bool)
    terminals[2] = True
    timeouts = terminals.copy()
    _write_raw(tmp_path / "r.hdf5", n=6, override={"terminals": terminals, "timeouts": timeouts})
    out = _all(_open(tmp_path / "r.hdf5", tmp_path / "root"))
    assert out["next", "terminated"][2].item() and not out["next", "truncated"][2].item()


def test_use_truncated_as_done_false(tmp_path):
    _write_raw(tmp_path / "raw.hdf5", n=10, next_obs=True)
    both = _all(_open(tmp_path / "raw.hdf5", tmp_path / "root"))
    term = _open(tmp_path / "raw.hdf5", tmp_path / "root", use_truncated_as_done=False)
    out = _all(term)
    assert both["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3, 6]
    assert out["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [3]
    assert out["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [6]
    assert out["episode"].tolist() == both["episode"].tolist()  # boundaries do not change
    assert term.data_path_root != _open(tmp_path / "raw.hdf5", tmp_path / "root").data_path_root


def test_infos_and_metadata(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, n=10)
    with h5py.File(path, "a") as f:
        f["infos/qpos"] = np.arange(20.0).reshape(10, 2)
        f["infos/goal/xy"] = np.ones((10, 2), np.float32)
        f["infos/name"] = np.array([b"x"] * 10)  # not numeric: skipped, listed
        f["metadata/algorithm"] = "SAC"
        f["metadata/iteration"] = 3
        f["metadata/policy/fc0/weight"] = np.zeros((256, 17), np.float32)
        f.attrs["env"] = "Hopper-v3"
    rb = _open(path, tmp_path / "root")
    out = _all(rb)
    assert torch.equal(out["info", "qpos"], torch.arange(20.0, dtype=torch.float64).reshape(10, 2))
    assert out["info", "goal", "xy"].shape == (10, 2)
    meta = rb.metadata
    assert meta["format"] == "D4RL HDF5"
    assert meta["file_metadata"]["algorithm"] == "SAC"
    assert meta["file_metadata"]["iteration"] == 3
    assert meta["file_metadata"]["policy/fc0/weight"] == {"shape": [256, 17], "dtype": "float32"}
    assert meta["file_metadata"]["env"] == "Hopper-v3"
    assert "infos/name" in meta["ignored_keys"]
    assert "metadata" not in out.keys()


def test_chunked_conversion_matches_in_memory(tmp_path, monkeypatch):
    for next_obs in (False, True):
        path = tmp_path / f"raw{next_obs}.hdf5"
        _write_raw(path, n=23, next_obs=next_obs)
        monkeypatch.setattr(D4RLExperienceReplay, "chunk_bytes", 64)  # a few rows per chunk
        rb = _open(path, tmp_path / f"root{next_obs}")
        whole = rb._convert()
        assert (rb[:] == whole).all()
        monkeypatch.undo()


def test_specs_and_sampling(tmp_path):
    _write_raw(tmp_path / "raw.hdf5", n=10)
    rb = _open(tmp_path / "raw.hdf5", tmp_path / "root", batch_size=4)
    batch = rb.sample()
    assert batch.shape == (4,)
    specs = rb.specs
    assert specs["observation"].shape == (3,)
    assert specs["action"].shape == (2,)
    with pytest.raises(RuntimeError, match="immutable"):
        rb.extend(batch)


def test_slices_stay_within_episodes(tmp_path):
    td = _ted([0] * 40, ([0] * 9 + [1]) * 4)
    path = export_d4rl(td, tmp_path / "e.hdf5")
    rb = _open(path, tmp_path / "root", batch_size=20, sampler=SliceSampler(slice_len=5))
    episodes = rb.sample()["episode"].view(4, 5)
    assert (episodes == episodes[:, :1]).all()


def test_action_bounds_from_file_metadata(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, n=10)
    with h5py.File(path, "a") as f:
        f["metadata/action_low"] = -np.ones(2)
        f["metadata/action_high"] = np.ones(2)
    spec = _open(path, tmp_path / "root").specs["action"]
    assert isinstance(spec, Bounded)
    assert spec.shape == (2,)
    assert spec.is_in(torch.tensor([0.5, -0.5]))
    assert not spec.is_in(torch.tensor([1.5, 0.0]))


def test_split_trajs(tmp_path):
    _write_raw(tmp_path / "raw.hdf5", n=10)
    rb = _open(tmp_path / "raw.hdf5", tmp_path / "root", split_trajs=True)
    assert len(rb) == 3  # one item per trajectory
    data = rb[:]
    assert data["mask"].shape == (3, 4)
    assert data["mask"].sum(-1).tolist() == [4, 3, 3]
    assert data["episode"][1, :3].tolist() == [1, 1, 1]


def test_source_change_reconverts(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, n=10, seed=0)
    first = _open(path, tmp_path / "root")[:]["observation"]
    cols = _write_raw(path, n=12, seed=1)
    again = _open(path, tmp_path / "root")[:]
    assert again.shape == (12,)
    assert torch.equal(again["observation"], torch.from_numpy(cols["observations"]))
    assert not torch.equal(again["observation"][:10], first)


# -- modes -----------------------------------------------------------------------------------------
def test_direct_file_mode_in_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    _write_raw(root / "mine-v0.hdf5", n=10)
    rb = D4RLExperienceReplay("mine-v0", root=root)
    assert len(rb) == 10
    assert rb.data_path_root == root / "mine-v0"
    assert (root / "mine-v0" / "flat").is_dir()


def test_default_root_from_env_var(tmp_path):
    root = tmp_path / "cache" / "d4rl"
    root.mkdir(parents=True)
    _write_raw(root / "x.hdf5", n=10)
    assert len(D4RLExperienceReplay("x")) == 10


def test_from_env_uses_d4rl_file_names(tmp_path):
    home = tmp_path / "d4rl_home"
    home.mkdir()
    name = D4RL_DATASET_URLS["hopper-medium-v2"].rsplit("/", 1)[-1]
    assert name == "hopper_medium-v2.hdf5"
    _write_raw(home / name, n=10)
    rb = D4RLExperienceReplay("hopper-medium-v2", from_env=True, root=tmp_path / "root")
    assert len(rb) == 10 and rb.source_path == home / name
    # an id d4rl does not know is looked for under its own name
    _write_raw(home / "custom-v0.hdf5", n=7)
    assert len(D4RLExperienceReplay("custom-v0", from_env=True, root=tmp_path / "root")) == 7
    with pytest.raises(ValueError, match="not both"):
        D4RLExperienceReplay("x", from_env=True, data_file=home / name)


def test_missing_file_message(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        D4RLExperienceReplay("hopper-medium-v2", root=tmp_path / "root")
    msg = str(err.value)
    assert str(tmp_path / "root" / "hopper-medium-v2.hdf5") in msg
    assert "'hopper-medium-v2'" in msg and "D4RL HDF5" in msg
    assert "download=True" in msg and "get_dataset()" in msg and "export_d4rl" in msg
    with pytest.raises(DatasetNotFoundError) as err:
        D4RLExperienceReplay("hopper-medium-v2", from_env=True, root=tmp_path / "root")
    assert str(tmp_path / "d4rl_home" / "hopper_medium-v2.hdf5") in str(err.value)
    with pytest.raises(DatasetNotFoundError, match="data_file|nope.hdf5"):
        _open(tmp_path / "nope.hdf5", tmp_path / "root")


def test_download_only_when_asked(tmp_path, monkeypatch):
    payload = tmp_path / "served.hdf5"
    _write_raw(payload, n=10)
    calls = []

    def fake_urlopen(url, timeout=None):
        calls.append(url)
        return io.BytesIO(payload.read_bytes())

    monkeypatch.setattr(d4rl_module.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(DatasetNotFoundError):
        D4RLExperienceReplay("hopper-medium-v2", from_env=True, root=tmp_path / "root")
    assert calls == []
    rb = D4RLExperienceReplay(
        "hopper-medium-v2", from_env=True, root=tmp_path / "root", download=True
    )
    assert calls == [D4RL_DATASET_URLS["hopper-medium-v2"]]
    assert len(rb) == 10
    assert (tmp_path / "d4rl_home" / "hopper_medium-v2.hdf5").is_file()
    with pytest.raises(DatasetNotFoundError, match="no download URL"):
        D4RLExperienceReplay("unknown-v9", root=tmp_path / "root", download=True)


def test_failed_download_leaves_nothing(tmp_path, monkeypatch):
    def broken(url, timeout=None):
        raise OSError("network is unreachable")

    monkeypatch.setattr(d4rl_module.urllib.request, "urlopen", broken)
    with pytest.raises(DatasetNotFoundError, match="unreachable"):
        D4RLExperienceReplay("hopper-medium-v2", root=tmp_path / "root", download=True)
    assert not list((tmp_path / "root").glob("*hdf5*"))


def test_missing_h5py(tmp_path, monkeypatch):
    monkeypatch.setattr(d4rl_module, "_has_h5py", False)
    with pytest.raises(ImportError, match=r"torchrl\[offline\]"):
        export_d4rl(_ted(TERM, TRUNC), tmp_path / "x.hdf5")


# -- malformed files -------------------------------------------------------------------------------
def _format_error(path, root, *match):
    with pytest.raises(DatasetFormatError) as err:
        _open(path, root)
    msg = str(err.value)
    assert str(path) in msg
    for m in match:
        assert m in msg, msg
    assert not (root / "ds" / "flat").exists()
    return msg


def test_not_hdf5(tmp_path):
    path = tmp_path / "text.hdf5"
    path.write_text("observations,actions\n1,2\n")
    _format_error(path, tmp_path / "root", "HDF5")


def test_truncated_file(tmp_path):
    good = tmp_path / "good.hdf5"
    _write_raw(good, n=2000, obs_dim=17)
    path = tmp_path / "cut.hdf5"
    data = good.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _format_error(path, tmp_path / "root")


@pytest.mark.parametrize("key", ["observations", "actions", "rewards", "terminals"])
def test_missing_key(tmp_path, key):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, drop=(key,))
    _format_error(path, tmp_path / "root", repr(key), "missing")


def test_missing_timeouts_is_allowed(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, drop=("timeouts",), next_obs=True)
    out = _all(_open(path, tmp_path / "root"))
    assert out["episode"].tolist() == [0] * 4 + [1] * 6


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("rewards", np.zeros(9, np.float32), "9 rows, expected 10"),
        ("actions", np.zeros((11, 2), np.float32), "11 rows, expected 10"),
        ("timeouts", np.zeros(3, bool), "3 rows, expected 10"),
        ("rewards", np.zeros((10, 3), np.float32), "shape [10, 3]"),
        ("terminals", np.zeros((10, 2), bool), "shape [10, 2]"),
        ("next_observations", np.zeros((10, 4), np.float32), "shape [10, 4]"),
        ("observations", np.array([b"a"] * 10), "dtype"),
        ("terminals", np.array([b"n"] * 10), "dtype"),
    ],
)
def test_wrong_length_shape_dtype(tmp_path, key, value, expected):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, n=10, override={key: value})
    _format_error(path, tmp_path / "root", repr(key), expected)


def test_group_instead_of_array(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path, drop=("rewards",))
    with h5py.File(path, "a") as f:
        f.create_group("rewards")
    _format_error(path, tmp_path / "root", "'rewards'", "group")


# -- export errors ---------------------------------------------------------------------------------
def test_export_errors(tmp_path):
    td = _ted(TERM, TRUNC)
    with pytest.raises(KeyError, match="'pixels'"):
        export_d4rl(td, tmp_path / "a.hdf5", observation_key="pixels")
    nested = td.clone()
    nested["observation"] = TensorDict({"a": torch.zeros(12, 2)}, [12])
    with pytest.raises(TypeError, match="one array per field"):
        export_d4rl(nested, tmp_path / "a.hdf5")
    with pytest.raises(ValueError, match="batch"):
        export_d4rl(td.reshape(2, 2, 3), tmp_path / "a.hdf5")
    with pytest.raises(TypeError, match="TensorDict or a ReplayBuffer"):
        export_d4rl({"observation": torch.zeros(3)}, tmp_path / "a.hdf5")
    with pytest.raises(ValueError, match="empty"):
        export_d4rl(TensorDictReplayBuffer(storage=LazyTensorStorage(4)), tmp_path / "a.hdf5")
    clash = td.clone()
    clash["qpos"] = torch.zeros(12)
    with pytest.raises(ValueError, match="infos/qpos"):
        export_d4rl(clash, tmp_path / "a.hdf5")
    assert not list(tmp_path.glob("*a.hdf5*"))


def test_export_custom_keys(tmp_path):
    td = _ted(TERM, TRUNC)
    td.rename_key_("observation", "state")
    td.rename_key_(("next", "observation"), ("next", "state"))
    td.rename_key_("action", "u")
    path = export_d4rl(td, tmp_path / "c.hdf5", observation_key="state", action_key="u")
    out = _all(_open(path, tmp_path / "root"))
    assert torch.equal(out["observation"], td["state"])
    assert torch.equal(out["next", "observation"], td["next", "state"])
    assert torch.equal(out["action"], td["u"])


def test_delete_keeps_the_source(tmp_path):
    path = tmp_path / "raw.hdf5"
    _write_raw(path)
    rb = _open(path, tmp_path / "root")
    rb.delete()
    assert path.is_file() and not (tmp_path / "root" / "ds").exists()
    shutil.rmtree(tmp_path / "root", ignore_errors=True)


def test_offline_to_online_and_prefill_open_dataset_ids(tmp_path, monkeypatch):
    """A ``"d4rl:<id>"`` string opens the reader through the registry, with the given keywords."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.datasets import DatasetNotFoundError, export_d4rl, ted_from_arrays
    from torchrl.data.replay_buffers import OfflineToOnlineReplayBuffer, prefill_replay_buffer

    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    n = 20
    obs = torch.arange(n, dtype=torch.float32).unsqueeze(-1)
    data = ted_from_arrays(
        obs, torch.zeros(n, 1), torch.ones(n), torch.zeros(n), torch.zeros(n), obs + 1
    )
    path = export_d4rl(data, tmp_path / "tiny.hdf5")
    rb = OfflineToOnlineReplayBuffer(
        "d4rl:tiny", data_file=path, online_capacity=10, offline_fraction=0.25, batch_size=8
    )
    online = data[:5].clone()
    online["observation"] = -online["observation"] - 1  # online items are negative
    rb.extend(online)
    batch = rb.sample()
    assert int((batch["observation"] >= 0).sum()) == 2  # a quarter of 8 from the file
    filled = prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(50)), "d4rl:tiny")
    assert len(filled) == n  # the converted copy under $TORCHRL_DATASETS_ROOT is reused
    with pytest.raises(DatasetNotFoundError):
        prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(5)), "d4rl:absent-v0")
