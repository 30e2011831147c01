"""A centralised critic over several agent groups (heterogeneous or ad-hoc multi-agent teams).

``MultiAgentMLP(centralized=True)`` sees the agents of one group. :class:`CrossGroupCritic`
reads the observations of every group (each with its own observation size), embeds each agent
with its group's encoder, runs a shared trunk on the whole team and writes one value per agent
back under each group's key, so MAPPO/IPPO losses can use it per group unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl._types import DeviceLike, NestedKey
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.models.mlp import MLP

__all__ = ["CrossCriticGroupSpec", "CrossGroupCritic", "CrossGroupCriticSpec"]


@dataclasses.dataclass
class CrossCriticGroupSpec:
    """What :class:`CrossGroupCritic` needs to know about one agent group.

    Args:
        obs_dim: size of one agent's observation vector.
        n_agents: number of agents in the group.
        obs_key: entry holding the group's observations ``[*B, n_agents, obs_dim]``, e.g.
            ``("soldiers", "observation")``.
        value_key: entry where the group's values ``[*B, n_agents, 1]`` are written, e.g.
            ``("soldiers", "state_value")``.

    Examples:
        >>> spec = CrossCriticGroupSpec(5, 3, ("red", "observation"), ("red", "state_value"))
        >>> spec.n_agents, spec.value_key
        (3, ('red', 'state_value'))
    """

    obs_dim: int
    n_agents: int
    obs_key: NestedKey
    value_key: NestedKey


#: The same class under the name the issue tracker and some TorchRL examples use.
CrossGroupCriticSpec = CrossCriticGroupSpec


class _CrossGroupNet(nn.Module):
    """Observations of every group (in ``group_map`` order) -> values of every group."""

    def __init__(
        self,
        group_map: Mapping[str, CrossCriticGroupSpec],
        d_model: int,
        trunk_depth: int,
        trunk_cells: int,
        activation_class: type[nn.Module],
        share_params: bool,
        detach_groups: frozenset[str],
        device: DeviceLike,
    ) -> None:
        super().__init__()
        self.names = list(group_map)
        self.specs = [group_map[name] for name in self.names]
        self.d_model = d_model
        self.detach = [name in detach_groups for name in self.names]
        self.encoders = nn.ModuleList(
            MLP(
                in_features=spec.obs_dim,
                out_features=d_model,
                depth=0,
                activation_class=activation_class,
                activate_last_layer=True,
                device=device,
            )
            for spec in self.specs
        )
        team_width = d_model * sum(spec.n_agents for spec in self.specs)
        self.trunk: nn.Module
        if trunk_depth > 0:
            self.trunk = MLP(
                in_features=team_width,
                out_features=trunk_cells,
                depth=trunk_depth - 1,
                num_cells=trunk_cells,
                activation_class=activation_class,
                activate_last_layer=True,
                device=device,
            )
            trunk_width = trunk_cells
        else:
            self.trunk = nn.Identity()
            trunk_width = team_width
        # Each agent's value reads the team features and its own embedding, so agents of one
        # group get different values even with a shared head.
        n_heads = 1 if share_params else len(self.specs)
        self.heads = nn.ModuleList(
            nn.Linear(trunk_width + d_model, 1, device=device) for _ in range(n_heads)
        )

    def forward(self, *observations: torch.Tensor) -> tuple[torch.Tensor, ...]:
        embeddings = []
        for name, spec, encoder, detach, obs in zip(
            self.names, self.specs, self.encoders, self.detach, observations
        ):
            if obs.shape[-2:] != (spec.n_agents, spec.obs_dim):
                raise ValueError(
                    f"CrossGroupCritic: group {name!r} expects observations "
                    f"[*B, n_agents={spec.n_agents}, obs_dim={spec.obs_dim}] at {spec.obs_key!r}, "
                    f"got shape {tuple(obs.shape)}"
                )
            embedding = encoder(obs)
            embeddings.append(embedding.detach() if detach else embedding)
        batch = torch.broadcast_shapes(*(e.shape[:-2] for e in embeddings))
        team = torch.cat([e.expand(*batch, *e.shape[-2:]).flatten(-2) for e in embeddings], -1)
        features = self.trunk(team)
        values = []
        for i, embedding in enumerate(embeddings):
            head = self.heads[i if len(self.heads) > 1 else 0]
            n_agents = embedding.shape[-2]
            shared = features.unsqueeze(-2).expand(*features.shape[:-1], n_agents, -1)
            own = embedding.expand(*batch, *embedding.shape[-2:])
            values.append(head(torch.cat([shared, own], -1)))
        return tuple(values)


class CrossGroupCritic(TensorDictModule):
    """A centralised critic that conditions every group's values on the observations of all groups.

    Each group has an encoder ``Linear(obs_dim -> d_model)`` + activation shared by its agents;
    the embeddings of all agents of all groups are concatenated into a team state, which a shared
    MLP trunk maps to team features; a value head reads the team features and an agent's own
    embedding and writes ``[*B, n_agents, 1]`` at the group's ``value_key``. Groups listed in
    ``detach_groups`` (e.g. a fixed-policy group in ad-hoc teamwork) inform the values but get
    no gradient through their embedding.

    Args:
        group_map: group name -> :class:`CrossCriticGroupSpec`, in a fixed order.
        d_model: size of the per-agent embeddings.
        trunk_depth: hidden layers of the shared trunk (0: the team state is the feature).
        trunk_cells: width of the trunk's layers.
        activation_class: activation of the encoders and the trunk.
        share_params: one value head for all groups instead of one per group.
        detach_groups: names of the groups whose embeddings are detached.
        device: device of the parameters.

    Examples:
        >>> from tensordict import TensorDict
        >>> critic = CrossGroupCritic({
        ...     "red": CrossCriticGroupSpec(4, 2, ("red", "observation"), ("red", "state_value")),
        ...     "blue": CrossCriticGroupSpec(6, 3, ("blue", "observation"), ("blue", "state_value")),
        ... }, d_model=8, trunk_cells=16)
        >>> td = TensorDict({"red": TensorDict(observation=torch.randn(5, 2, 4), batch_size=[5, 2]),
        ...                  "blue": TensorDict(observation=torch.randn(5, 3, 6), batch_size=[5, 3])},
        ...                 batch_size=[5])
        >>> td = critic(td)
        >>> td["red", "state_value"].shape, td["blue", "state_value"].shape
        (torch.Size([5, 2, 1]), torch.Size([5, 3, 1]))
    """

    def __init__(
        self,
        group_map: Mapping[str, CrossCriticGroupSpec],
        *,
        d_model: int = 64,
        trunk_depth: int = 2,
        trunk_cells: int = 256,
        activation_class: type[nn.Module] = nn.Tanh,
        share_params: bool = False,
        detach_groups: Iterable[str] | None = None,
        device: DeviceLike = None,
    ) -> None:
        if not group_map:
            raise ValueError("CrossGroupCritic needs at least one group in group_map")
        for name, spec in group_map.items():
            if not isinstance(spec, CrossCriticGroupSpec):
                raise TypeError(
                    f"CrossGroupCritic: group_map[{name!r}] must be a CrossCriticGroupSpec, "
                    f"got {type(spec).__name__}"
                )
        detached = frozenset(detach_groups or ())
        unknown = detached - set(group_map)
        if unknown:
            raise KeyError(
                f"CrossGroupCritic: detach_groups {sorted(unknown)} are not groups of group_map "
                f"({list(group_map)})"
            )
        if trunk_depth < 0:
            raise ValueError(f"CrossGroupCritic: trunk_depth must be >= 0, got {trunk_depth}")
        net = _CrossGroupNet(
            group_map,
            d_model,
            trunk_depth,
            trunk_cells,
            activation_class,
            share_params,
            detached,
            device,
        )
        in_keys = [spec.obs_key for spec in group_map.values()]
        out_keys = [spec.value_key for spec in group_map.values()]
        super().__init__(net, in_keys=module_keys(in_keys), out_keys=module_keys(out_keys))
        self.group_map: dict[str, CrossCriticGroupSpec] = dict(group_map)
        self.detach_groups = detached
        self.share_params = share_params

    def extra_repr(self) -> str:
        return f"groups={list(self.group_map)}, detach_groups={sorted(self.detach_groups)}"
