"""``ACTModel``: Action Chunking with Transformers (Zhao et al., 2023), for vector observations.

A conditional VAE. Its encoder (used only in training) reads the observation and the expert's
chunk of the next ``chunk_size`` actions and infers a latent "style" ``z``; its decoder maps
``(z, observation)`` to a whole chunk at once: a transformer encoder over the two condition
tokens, and a transformer decoder whose ``chunk_size`` learned queries each produce one action.
At inference ``z`` is the prior's mean, zero. Train it with :class:`~torchrl.objectives.ACTLoss`
and act with :class:`~torchrl.modules.tensordict_module.ActionChunkExecutor`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["ACTModel"]


def _encoder(embed_dim: int, num_heads: int, ff: int, dropout: float, layers: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(
        embed_dim, num_heads, ff, dropout, batch_first=True, norm_first=True
    )
    # nested tensors (a fast path for padded batches) warn with norm_first; we never pad
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class ACTModel(nn.Module):
    """The ACT network: observation (and, in training, the expert chunk) to a chunk of actions.

    Args:
        obs_dim: the observation size.
        action_dim: the size of one action.
        chunk_size: ``k``, the number of future actions predicted at once.
        latent_dim: the size of the CVAE latent ``z``.
        embed_dim: the transformer width.
        num_heads: attention heads (must divide ``embed_dim``).
        num_encoder_layers: layers of the CVAE encoder and of the decoder's encoder.
        num_decoder_layers: layers of the transformer decoder.
        dim_feedforward: hidden size of the feed-forward blocks (default ``4 * embed_dim``).
        dropout: dropout inside the transformer layers.

    Inputs ``observation [*B, obs_dim]``, optionally ``action_chunk [*B, k, action_dim]`` and
    its padding mask ``action_is_pad [*B, k]`` (steps past an episode's end, hidden from the
    encoder); outputs ``(action_pred [*B, k, action_dim], mu [*B, latent_dim], log_var [*B, latent_dim])``.
    With an ``action_chunk``, ``z`` is drawn from the posterior ``N(mu, exp(log_var))`` in
    training mode and is ``mu`` in eval mode; without one, ``z = mu = log_var = 0``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> model = ACTModel(obs_dim=3, action_dim=2, chunk_size=5, embed_dim=32, num_heads=2)
        >>> train_net = TensorDictModule(
        ...     model, ["observation", "action_chunk"], ["action_pred", "mu", "log_var"])
        >>> td = TensorDict(observation=torch.randn(4, 3), action_chunk=torch.randn(4, 5, 2),
        ...                 batch_size=[4])
        >>> train_net(td)["action_pred"].shape, td["mu"].shape
        (torch.Size([4, 5, 2]), torch.Size([4, 32]))
        >>> policy = TensorDictModule(model, ["observation"], ["action_chunk", "mu", "log_var"])
        >>> policy(TensorDict(observation=torch.randn(3), batch_size=[]))["action_chunk"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        chunk_size: int,
        *,
        latent_dim: int = 32,
        embed_dim: int = 128,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for name, value in (("obs_dim", obs_dim), ("action_dim", action_dim)):
            if value < 1:
                raise ValueError(f"ACTModel: {name} must be >= 1, got {value}")
        if chunk_size < 1:
            raise ValueError(f"ACTModel: chunk_size must be >= 1, got {chunk_size}")
        if embed_dim % num_heads:
            raise ValueError(
                f"ACTModel: num_heads ({num_heads}) must divide embed_dim ({embed_dim})"
            )
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.chunk_size = chunk_size
        self.latent_dim = latent_dim
        ff = 4 * embed_dim if dim_feedforward is None else dim_feedforward

        # CVAE encoder q(z | o, a_{t:t+k}): [CLS, obs, a_1..a_k] -> CLS output -> (mu, log_var)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.posterior_obs = nn.Linear(obs_dim, embed_dim)
        self.posterior_action = nn.Linear(action_dim, embed_dim)
        self.posterior_pos = nn.Parameter(torch.zeros(1, chunk_size + 2, embed_dim))
        self.posterior = _encoder(embed_dim, num_heads, ff, dropout, num_encoder_layers)
        self.latent_head = nn.Linear(embed_dim, 2 * latent_dim)

        # decoder p(a_{t:t+k} | z, o): memory from [z, obs]; k learned queries, one per action
        self.latent_in = nn.Linear(latent_dim, embed_dim)
        self.obs_in = nn.Linear(obs_dim, embed_dim)
        self.memory_pos = nn.Parameter(torch.zeros(1, 2, embed_dim))
        self.memory = _encoder(embed_dim, num_heads, ff, dropout, num_encoder_layers)
        self.queries = nn.Parameter(torch.zeros(1, chunk_size, embed_dim))
        layer = nn.TransformerDecoderLayer(
            embed_dim, num_heads, ff, dropout, batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, num_decoder_layers)
        self.action_head = nn.Linear(embed_dim, action_dim)
        for p in (self.cls_token, self.posterior_pos, self.memory_pos, self.queries):
            nn.init.normal_(p, std=0.02)

    def encode(
        self, observation: Tensor, action_chunk: Tensor, action_is_pad: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The posterior's ``(mu, log_var)``, each ``[N, latent_dim]`` (flat batch ``N``).

        ``action_is_pad`` (``[N, chunk_size]``, ``True`` for steps past the episode's end) hides
        those actions from the encoder's attention.
        """
        n = observation.shape[0]
        tokens = torch.cat(
            [
                self.cls_token.expand(n, -1, -1),
                self.posterior_obs(observation).unsqueeze(1),
                self.posterior_action(action_chunk),
            ],
            1,
        )
        mask = None
        if action_is_pad is not None:
            seen = torch.zeros(n, 2, dtype=torch.bool, device=action_is_pad.device)
            mask = torch.cat([seen, action_is_pad.bool()], 1)
        cls = self.posterior(tokens + self.posterior_pos, src_key_padding_mask=mask)[:, 0]
        mu, log_var = self.latent_head(cls).chunk(2, -1)
        return mu, log_var

    def decode(self, observation: Tensor, z: Tensor) -> Tensor:
        """A chunk ``[N, chunk_size, action_dim]`` from observations and latents (flat batch)."""
        memory = torch.stack([self.latent_in(z), self.obs_in(observation)], 1)
        memory = self.memory(memory + self.memory_pos)
        queries = self.queries.expand(observation.shape[0], -1, -1)
        return self.action_head(self.decoder(queries, memory))

    def forward(
        self,
        observation: Tensor,
        action_chunk: Tensor | None = None,
        action_is_pad: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        if observation.shape[-1] != self.obs_dim:
            raise ValueError(
                f"ACTModel: observations have {observation.shape[-1]} features, expected "
                f"obs_dim={self.obs_dim}"
            )
        batch = observation.shape[:-1]
        obs = observation.reshape(-1, self.obs_dim)
        if action_chunk is None:
            mu = obs.new_zeros(obs.shape[0], self.latent_dim)
            log_var = torch.zeros_like(mu)
            z = mu
        else:
            expected = (*batch, self.chunk_size, self.action_dim)
            if action_chunk.shape != expected:
                raise ValueError(
                    f"ACTModel: action_chunk has shape {tuple(action_chunk.shape)}, expected "
                    f"{expected} (batch, chunk_size, action_dim)"
                )
            pad = None if action_is_pad is None else action_is_pad.reshape(-1, self.chunk_size)
            mu, log_var = self.encode(obs, action_chunk.reshape(-1, *expected[-2:]), pad)
            z = mu
            if self.training:
                z = mu + (0.5 * log_var).exp() * torch.randn_like(mu)
        actions = self.decode(obs, z)
        return (
            actions.reshape(*batch, self.chunk_size, self.action_dim),
            mu.reshape(*batch, self.latent_dim),
            log_var.reshape(*batch, self.latent_dim),
        )
