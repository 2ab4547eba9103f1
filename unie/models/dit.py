"""The DiT backbone of the released MDLM-family checkpoints, written for this project, whose parameter names
match the upstream state dicts key for key (so a published checkpoint loads with ``strict=True``).

One module covers the five published networks (``docs/released-checkpoints.md``):

* MDLM ``kuleshov-group/mdlm-owt``: bidirectional; the adaLN modules exist but the model is *not*
  time-conditioned: upstream feeds ``sigma = 0`` (``Diffusion._process_sigma``), so the modulation is the
  constant ``adaLN(silu(sigma_map(0)))``, not the identity.
* SEDD (``louaaron/sedd-small``, MDLM's ``sedd.ckpt``) and Duo: bidirectional, time-conditioned on ``sigma``.
* BD3-LM (``kuleshov-group/bd3lm-owt-block_size4``): adaLN present, ``sigma`` zeroed, block-causal masks
  come from the caller (``attn_mask``/``positions``, the two-stream ``[xt ; x0]`` layout of
  :mod:`unie.methods.bd3lm`); ``block_size`` is recorded in the config.
* MDLM's OWT AR (``ar.ckpt``): causal, no ``sigma_map`` and no adaLN modules at all (``adaln=False``).

Upstream semantics reproduced (MDLM ``models/dit.py``, ``models/autoregressive.py``; SEDD
``model/transformer.py``; Duo ``models/dit.py``; BD3-LM ``models/hf/modeling_bd3lm.py``):

* LayerNorm without bias (``F.layer_norm`` in float32, times ``weight``), eps 1e-5.
* adaLN: ``modulate(x) = x (1 + scale) + shift`` and the residual ``h + gate * f(x)`` -- the gate is used as
  is (adaLN-Zero), **not** ``1 + gate`` as in :class:`unie.models.transformer.Block`; without adaLN the
  residual scale is 1.
* Rotary embeddings on q and k, "rotate half" pairing (``flash_attn``'s non-interleaved kernel), base 10,000,
  tables from the stored ``rotary_emb.inv_freq`` buffer; attention scale ``1/sqrt(head_dim)``.
* MLP ``Linear -> GELU(tanh) -> Linear`` with biases; ``attn_qkv``/``attn_out`` without bias.
* Time embedding: ``TimestepEmbedder`` (256 sinusoidal frequencies -> ``Linear -> SiLU -> Linear`` to
  ``cond_dim``), then ``c = silu(sigma_map(sigma))``.
* Output: ``output_layer.linear(modulate(norm_final(h)))`` with bias (untied embeddings).

Upstream runs the blocks under bf16 autocast on CUDA; here the computation is in the module's dtype (float32
unless the loader is given another one).  Calling convention = :class:`unie.models.transformer.Transformer`'s,
so the method wrappers (``MDLMDenoiser``, ``SEDDScore``, ``DuoDenoiser``, ``BD3Denoiser``, ``ARModel``) take it
unchanged: ``net(x, sigma=None, attn_mask=None, positions=None, inputs_embeds=None, cache=None, causal=None)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.registry import BACKBONES
from .transformer import cached_keys, causal_mask

FREQ_DIM = 256  # TimestepEmbedder.frequency_embedding_size upstream

# what a model fine-tuned from a released checkpoint may set in `arch`: the rest is the checkpoint's
DIT_ARCH_KEYS = ("dropout",)


@dataclass(frozen=True)
class DiTConfig:
    """The architecture of one released network.

    ``adaln``: the adaLN modules (``sigma_map``, ``adaLN_modulation``) exist; ``time_conditioning``: ``sigma`` is
    used (otherwise it is replaced by zeros, as upstream does); ``causal``: causal attention (the AR);
    ``block_size``: BD3-LM's block length (informational: masks come from the caller)."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    cond_dim: int = 128
    mlp_ratio: int = 4
    dropout: float = 0.1
    adaln: bool = True
    time_conditioning: bool = False
    causal: bool = False
    block_size: int | None = None
    max_len: int = 1024

    def __post_init__(self):
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size")
        if self.time_conditioning and not self.adaln:
            raise ValueError("a time-conditioned DiT needs the adaLN modules (adaln=True)")


class LayerNorm(nn.Module):
    """LayerNorm without bias, normalised in float32 (upstream ``LayerNorm``)."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.layer_norm(x.float(), (x.shape[-1],)).to(self.weight.dtype) * self.weight


class Embedding(nn.Module):
    """``embedding`` ``(V, d)`` as a bare parameter (upstream ``EmbeddingLayer``)."""

    def __init__(self, d: int, vocab: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(vocab, d))
        nn.init.normal_(self.embedding, std=0.02)

    @property
    def weight(self):  # the name nn.Embedding uses (Duo's soft inputs read net.embed.weight)
        return self.embedding

    def forward(self, x):
        return self.embedding[x]


class SigmaMap(nn.Module):
    """``mlp(sinusoid(sigma))``: 256 frequencies -> ``cond_dim`` (upstream ``TimestepEmbedder``)."""

    def __init__(self, cond_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQ_DIM, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    @staticmethod
    def sinusoid(sigma: torch.Tensor, dim: int = FREQ_DIM, max_period: float = 10000.0) -> torch.Tensor:
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=sigma.device) / half)
        args = sigma.float()[:, None] * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return F.pad(emb, (0, 1)) if dim % 2 else emb

    def forward(self, sigma):
        w = self.mlp[0].weight
        return self.mlp(self.sinusoid(sigma).to(w.dtype))


class Rotary(nn.Module):
    """Holds ``inv_freq`` (a persistent buffer upstream, so it is part of the state dict)."""

    def __init__(self, head_dim: int, base: float = 10_000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim)))

    def tables(self, positions: torch.Tensor):
        """cos/sin ``(L, head_dim)`` for ``positions`` ``(L,)`` (each frequency used for both halves)."""
        ang = positions.float()[:, None] * self.inv_freq.float()[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        return ang.cos(), ang.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x cos + rotate_half(x) sin`` for ``x`` ``(B, H, L, Dh)``, tables ``(L, Dh)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return (x.float() * cos + torch.cat([-x2, x1], dim=-1).float() * sin).to(x.dtype)


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.norm1 = LayerNorm(d)
        self.attn_qkv = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.norm2 = LayerNorm(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(approximate="tanh"), nn.Linear(cfg.mlp_ratio * d, d)
        )
        self.dropout = cfg.dropout
        if cfg.adaln:
            self.adaLN_modulation = nn.Linear(cfg.cond_dim, 6 * d)

    def attention(self, x, cos, sin, causal, attn_mask, cache):
        B, L, D = x.shape
        H = self.n_heads
        q, k, v = self.attn_qkv(x).view(B, L, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = cached_keys(cache, k, v)  # the dict KV cache of unie.models.transformer
        attn_mask, is_causal = causal_mask(causal, attn_mask, L, k.shape[2], x.device)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=0.0, scale=1.0 / math.sqrt(D // H)
        )
        return self.attn_out(out.transpose(1, 2).reshape(B, L, D))

    def forward(self, h, cos, sin, c, causal, attn_mask=None, cache=None):
        drop = lambda t: F.dropout(t, self.dropout, self.training)
        if c is None:
            h = h + drop(self.attention(self.norm1(h), cos, sin, causal, attn_mask, cache))
            return h + drop(self.mlp(self.norm2(h)))
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(c)[:, None].chunk(6, dim=-1)
        h = h + g1 * drop(self.attention(self.norm1(h) * (1 + sc1) + sh1, cos, sin, causal, attn_mask, cache))
        return h + g2 * drop(self.mlp(self.norm2(h) * (1 + sc2) + sh2))


class FinalLayer(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.norm_final = LayerNorm(cfg.d_model)
        self.linear = nn.Linear(cfg.d_model, cfg.vocab_size)
        if cfg.adaln:
            self.adaLN_modulation = nn.Linear(cfg.cond_dim, 2 * cfg.d_model)

    def features(self, h, c):
        x = self.norm_final(h)
        if c is not None:
            shift, scale = self.adaLN_modulation(c)[:, None].chunk(2, dim=-1)
            x = x * (1 + scale) + shift
        return x

    def forward(self, h, c):
        return self.linear(self.features(h, c))


@BACKBONES.register("dit")
class DiT(nn.Module):
    """The released DiT: ``vocab_embed``, [``sigma_map``], ``rotary_emb``, ``blocks.N``, ``output_layer``
    (registration order = upstream's, so ``parameters()`` enumerates in the order of an upstream EMA).

    Saved by :func:`unie.models.checkpoint.save_model` like every network (``backbone: dit``, ``arch: dit``:
    the config is a :class:`DiTConfig`), so an imported released checkpoint is a unie model folder."""

    registry_name = "dit"
    config_class = DiTConfig

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab_embed = Embedding(cfg.d_model, cfg.vocab_size)
        if cfg.adaln:
            self.sigma_map = SigmaMap(cfg.cond_dim)
        self.rotary_emb = Rotary(cfg.d_model // cfg.n_heads)
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.n_layers))
        self.output_layer = FinalLayer(cfg)

    @property
    def device(self):
        return self.vocab_embed.embedding.device

    def new_cache(self) -> list:
        return [dict() for _ in self.blocks]

    @property
    def embed(self):
        """The token embedding as a module ``ids -> (.., d)`` (the name :class:`unie.models.transformer.Transformer`
        uses; :class:`unie.models.energy_net.EnergyNet` reads it)."""
        return self.vocab_embed

    def hidden(
        self,
        x: torch.Tensor | None = None,
        sigma: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: list | None = None,
        causal: bool | None = None,
    ) -> torch.Tensor:
        """The final hidden states ``(B, L, d)``: blocks, ``norm_final`` and its adaLN modulation, before
        ``output_layer.linear`` (the features EDLM's energy network pools)."""
        h = self.vocab_embed(x) if inputs_embeds is None else inputs_embeds.to(self.vocab_embed.embedding.dtype)
        B, L = h.shape[:2]
        causal = self.cfg.causal if causal is None else causal
        if positions is None:
            start = cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0
            positions = torch.arange(start, start + L, device=h.device)
        cos, sin = self.rotary_emb.tables(positions.to(h.device))
        c = None
        if self.cfg.adaln:
            if self.cfg.time_conditioning:
                if sigma is None:
                    raise ValueError("this DiT is time-conditioned: pass sigma")
                s = torch.as_tensor(sigma, device=h.device).float().reshape(-1).expand(B)
            else:
                s = torch.zeros(B, device=h.device)
            c = F.silu(self.sigma_map(s))
        for i, blk in enumerate(self.blocks):
            h = blk(h, cos, sin, c, causal, attn_mask, None if cache is None else cache[i])
        return self.output_layer.features(h, c)

    def forward(
        self,
        x: torch.Tensor | None = None,
        sigma: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: list | None = None,
        causal: bool | None = None,
        return_attn: int = 0,
    ) -> torch.Tensor:
        """Raw logits ``(B, L, V)`` float32 (no parameterisation: the method wrappers apply it).

        ``sigma`` ``(B,)``: required iff ``cfg.time_conditioning``; otherwise ignored and replaced by zeros
        (upstream's ``_process_sigma``).  ``attn_mask`` bool, True = may attend (overrides ``causal``);
        ``positions`` rotary positions ``(L,)`` (default ``0..L-1`` after the cache); ``cache`` per-layer dicts."""
        if return_attn:
            raise NotImplementedError("the released DiT does not return attention probabilities")
        h = self.hidden(
            x,
            sigma=sigma,
            attn_mask=attn_mask,
            positions=positions,
            inputs_embeds=inputs_embeds,
            cache=cache,
            causal=causal,
        )
        return self.output_layer.linear(h).float()


def backbone_for(cfg):
    """The network a config describes: a :class:`DiT` for a :class:`DiTConfig` (a released architecture and
    whatever is fine-tuned from it), else our :class:`~unie.models.transformer.Transformer`."""
    if isinstance(cfg, DiTConfig):
        return DiT(cfg)
    from .transformer import Transformer

    return Transformer(cfg)
