"""Multi-agent grouping: which agents share one nested entry of an env's TensorDicts.

A multi-agent env writes the data of a *group* of agents under the group's name, stacked along an
agent dim: ``("agents", "observation")`` has batch ``[*env.batch_size, n_agents_in_group]``
(DESIGN.md §2). A *group map* ``{group_name: [agent_name, ...]}`` says which agents go where; the
two usual maps are named by :class:`MarlGroupMapType`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

from torchrl._keys import ACTION, DONE, NEXT, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED

__all__ = ["MarlGroupMapType", "check_marl_grouping"]

# A group cannot be named like a reserved root entry: ("done", "observation") would be ambiguous.
_RESERVED = frozenset({NEXT, ACTION, REWARD, DONE, TERMINATED, TRUNCATED, RESET, OBSERVATION})


class MarlGroupMapType(Enum):
    """The two standard ways of grouping agents.

    ``ALL_IN_ONE_GROUP`` puts every agent in one group named ``"agents"``;
    ``ONE_GROUP_PER_AGENT`` gives each agent a group of its own, named after it.

    Examples:
        >>> from torchrl.envs import MarlGroupMapType
        >>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["a_0", "a_1"])
        {'agents': ['a_0', 'a_1']}
        >>> MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["a_0", "a_1"])
        {'a_0': ['a_0'], 'a_1': ['a_1']}
    """

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> dict[str, list[str]]:
        """Returns the group map of this type for the given agents.

        Args:
            agent_names: the env's agent names, in the env's order.

        Returns:
            ``{group_name: [agent_name, ...]}``.
        """
        names = [str(name) for name in agent_names]
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": names}
        return {name: [name] for name in names}


def check_marl_grouping(group_map: Mapping[str, Sequence[str]], agent_names: Sequence[str]) -> None:
    """Raises a ``ValueError`` unless ``group_map`` puts every agent in exactly one group.

    Args:
        group_map: ``{group_name: [agent_name, ...]}``.
        agent_names: all the env's agent names.

    Examples:
        >>> from torchrl.envs import check_marl_grouping
        >>> check_marl_grouping({"team": ["a", "b"]}, ["a", "b"])
        >>> check_marl_grouping({"team": ["a"]}, ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: group_map {'team': ['a']} leaves out the agents ['b'] (the env's agents: ['a', 'b'])
    """
    known = list(agent_names)
    if not group_map:
        raise ValueError(f"group_map is empty; the env's agents are {known}")
    seen: dict[str, str] = {}
    for group, members in group_map.items():
        if not isinstance(group, str) or not group:
            raise ValueError(f"group_map: group names must be non-empty strings, got {group!r}")
        if group in _RESERVED:
            raise ValueError(
                f"group_map: the group name {group!r} clashes with a reserved key "
                f"({sorted(_RESERVED)}); pick another name"
            )
        if isinstance(members, str) or not len(members):
            raise ValueError(
                f"group_map: group {group!r} must list one agent name or more, got {members!r}"
            )
        for agent in members:
            if agent not in known:
                raise ValueError(
                    f"group_map: group {group!r} names the agent {agent!r}, which the env does "
                    f"not have (the env's agents: {known})"
                )
            if agent in seen:
                raise ValueError(
                    f"group_map: the agent {agent!r} is in two groups ({seen[agent]!r} and "
                    f"{group!r})"
                )
            seen[agent] = group
    missing = [a for a in known if a not in seen]
    if missing:
        raise ValueError(
            f"group_map {dict(group_map)} leaves out the agents {missing} (the env's agents: "
            f"{known})"
        )


def resolve_group_map(
    group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None,
    agent_names: Sequence[str],
    default: MarlGroupMapType | Mapping[str, Sequence[str]],
) -> dict[str, list[str]]:
    """Turns a group map argument (or its default) into a checked ``{group: [agents]}`` dict.

    Args:
        group_map: what the user passed (``None``: use ``default``).
        agent_names: all the env's agent names.
        default: the env's own grouping.

    Returns:
        ``{group_name: [agent_name, ...]}``, checked by :func:`check_marl_grouping`.

    Examples:
        >>> from torchrl.envs.libs._marl import MarlGroupMapType, resolve_group_map
        >>> resolve_group_map(None, ["a", "b"], MarlGroupMapType.ONE_GROUP_PER_AGENT)
        {'a': ['a'], 'b': ['b']}
    """
    if group_map is None:
        group_map = default
    if isinstance(group_map, MarlGroupMapType):
        result = group_map.get_group_map(agent_names)
    elif isinstance(group_map, Mapping):
        result = {str(k): list(v) for k, v in group_map.items()}
    else:
        raise TypeError(
            f"group_map must be a MarlGroupMapType or a dict {{group: [agent names]}}, got "
            f"{group_map!r}"
        )
    check_marl_grouping(result, agent_names)
    return result


def prefix_group_map(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """Groups agents by their name up to the last ``"_"`` (``"piston_3"`` -> ``"piston"``).

    Examples:
        >>> from torchrl.envs.libs._marl import prefix_group_map
        >>> prefix_group_map(["piston_0", "piston_1", "ball"])
        {'piston': ['piston_0', 'piston_1'], 'ball': ['ball']}
    """
    groups: dict[str, list[str]] = {}
    for name in agent_names:
        head, sep, _ = str(name).rpartition("_")
        groups.setdefault(head if sep and head else str(name), []).append(str(name))
    return groups
