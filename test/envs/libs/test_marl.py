"""Tests of the multi-agent grouping helpers (no simulator needed)."""

import pytest

from torchrl.envs import MarlGroupMapType, check_marl_grouping
from torchrl.envs.libs._marl import prefix_group_map as _prefix_group_map
from torchrl.envs.libs._marl import resolve_group_map as _resolve_group_map

AGENTS = ["agent_0", "agent_1", "adversary_0"]


def test_group_map_types():
    assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(AGENTS) == {"agents": AGENTS}
    assert MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(AGENTS) == {a: [a] for a in AGENTS}


def test_prefix_group_map():
    assert _prefix_group_map(AGENTS) == {
        "agent": ["agent_0", "agent_1"],
        "adversary": ["adversary_0"],
    }
    assert _prefix_group_map(["solo", "_x"]) == {"solo": ["solo"], "_x": ["_x"]}


def test_check_marl_grouping_accepts_a_partition():
    check_marl_grouping({"good": ["agent_0", "agent_1"], "bad": ["adversary_0"]}, AGENTS)


@pytest.mark.parametrize(
    "group_map, match",
    [
        ({"g": ["agent_0", "agent_1"]}, "leaves out the agents \\['adversary_0'\\]"),
        ({"g": AGENTS, "h": ["agent_0"]}, "'agent_0' is in two groups"),
        ({"g": [*AGENTS, "ghost"]}, "'ghost', which the env does not have"),
        ({"done": AGENTS}, "clashes with a reserved key"),
        ({"g": []}, "must list one agent name or more"),
        ({"g": "agent_0"}, "must list one agent name or more"),
        ({}, "group_map is empty"),
    ],
)
def test_check_marl_grouping_errors(group_map, match):
    with pytest.raises(ValueError, match=match):
        check_marl_grouping(group_map, AGENTS)


def test_resolve_group_map():
    assert _resolve_group_map(None, AGENTS, MarlGroupMapType.ALL_IN_ONE_GROUP) == {"agents": AGENTS}
    custom = {"a": ["agent_0"], "b": ["agent_1", "adversary_0"]}
    assert _resolve_group_map(custom, AGENTS, MarlGroupMapType.ALL_IN_ONE_GROUP) == custom
    with pytest.raises(TypeError, match="MarlGroupMapType or a dict"):
        _resolve_group_map(["agent_0"], AGENTS, MarlGroupMapType.ALL_IN_ONE_GROUP)
