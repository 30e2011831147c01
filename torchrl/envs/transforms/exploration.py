"""``gSDENoise``: the per-episode noise matrix of generalized state-dependent exploration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchrl.data.specs import Unbounded
from torchrl.envs.transforms.tracking import TensorDictPrimer

__all__ = ["gSDENoise"]


class gSDENoise(TensorDictPrimer):
    """Primes the ``"_eps_gSDE"`` entry: standard-normal noise drawn at each reset.

    gSDE (Raffin et al., 2021) perturbs actions with ``eps @ features``, where the noise matrix
    ``eps`` (``[*shape, action_dim, state_dim]``) stays fixed for a whole episode: it is drawn
    again at every reset (of the sub-envs being reset) and carried by the steps.

    Args:
        state_dim: the size of the features the noise multiplies.
        action_dim: the action size.
        shape: extra leading dims of the noise (after the env's batch dims).
        **kwargs: passed to :class:`TensorDictPrimer` (e.g. ``reset_key``).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TransformedEnv, gSDENoise
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), gSDENoise(state_dim=3, action_dim=1))
        >>> env.reset()["_eps_gSDE"].shape
        torch.Size([2, 1, 3])
        >>> r = env.rollout(3)
        >>> bool((r["_eps_gSDE"][:, 0] == r["_eps_gSDE"][:, 2]).all())  # fixed within an episode
        True
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        state_dim: int | None = None,
        action_dim: int | None = None,
        shape: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        if (state_dim is None) != (action_dim is None):
            raise ValueError("gSDENoise: give both state_dim and action_dim, or neither")
        tail = () if state_dim is None else (int(action_dim), int(state_dim))  # type: ignore[arg-type]
        lead = tuple(shape) if shape is not None else ()
        if not lead and not tail:
            raise ValueError("gSDENoise: give state_dim and action_dim, or a shape")
        kwargs.setdefault("random", True)
        kwargs.setdefault("expand_specs", True)
        super().__init__(primers={"_eps_gSDE": Unbounded(shape=(*lead, *tail))}, **kwargs)
        self.state_dim = state_dim
        self.action_dim = action_dim
