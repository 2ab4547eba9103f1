"""Test helpers for the released checkpoints: the tiny stand-ins (written by :mod:`unie.models.standins`, shared with
the workflow's rule ``released_standin``) at the tests' vocabulary, and an independent reference forward pass of
the upstream DiT (written from the upstream equations over the state dict, not with :mod:`unie.models.dit`), so a
test compares our loader + module against the upstream math."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from unie.models import standins
from unie.models.dit import DiTConfig
from unie.models.standins import (  # noqa: F401 (re-exported to the tests)
    ARCH,
    TINY,
    HydraConfigStandIn,
    save_hf,
    save_lightning,
    save_sedd_hub,
)

V = 51  # 50 real tokens + the mask (last id), like GPT-2 + mask
MASK = V - 1
BOS = 49  # bos = eos, a real token (GPT-2's convention)
TOKENIZER = {"vocab_size": V, "mask_id": MASK, "bos_id": BOS, "eos_id": BOS}


def random_state(kind: str, seed: int, scale: float = 1.0) -> tuple[dict, DiTConfig]:
    """Random weights with the upstream key names at the tests' vocabulary ``V``."""
    return standins.random_state(kind, seed, V, scale=scale)


# ---------------------------------------------------------------------- the upstream math, from the state dict
def _ln(x, w):
    return F.layer_norm(x.float(), [x.shape[-1]]) * w[None, None, :]


def _rotary(L_positions: torch.Tensor, inv_freq: torch.Tensor):
    freqs = torch.einsum("i,j->ij", L_positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _timestep_embedding(t, dim=256, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def reference_logits(state: dict, cfg: DiTConfig, x: torch.Tensor, sigma=None, mask=None, positions=None):
    """Upstream ``DIT.forward`` / ``AR.forward`` (before any parameterisation): ``(B, L, V)`` raw outputs.

    ``sigma`` is zeroed when the model is not time-conditioned (``_process_sigma``); ``mask`` bool
    ``(L, L)`` (True = attend, BD3-LM's ``block_diff_mask``); ``positions`` the rotary positions."""
    B, L = x.shape
    H = cfg.n_heads
    h = state["vocab_embed.embedding"][x]
    c = None
    if cfg.adaln:
        s = sigma if cfg.time_conditioning else torch.zeros(B)
        t = _timestep_embedding(s)
        t = t @ state["sigma_map.mlp.0.weight"].T + state["sigma_map.mlp.0.bias"]
        t = F.silu(t) @ state["sigma_map.mlp.2.weight"].T + state["sigma_map.mlp.2.bias"]
        c = F.silu(t)
    pos = torch.arange(L) if positions is None else positions
    cos, sin = _rotary(pos, state["rotary_emb.inv_freq"])
    for i in range(cfg.n_layers):
        p = lambda n: state[f"blocks.{i}.{n}"]
        if c is not None:
            mod = (c @ p("adaLN_modulation.weight").T + p("adaLN_modulation.bias"))[:, None]
            sh1, sc1, g1, sh2, sc2, g2 = mod.chunk(6, dim=2)
        else:
            sh1 = sc1 = sh2 = sc2 = torch.zeros(())
            g1 = g2 = torch.ones(())
        a = _ln(h, p("norm1.weight")) * (1 + sc1) + sh1
        qkv = (a @ p("attn_qkv.weight").T).reshape(B, L, 3, H, -1)  # 'b s (three h d) -> b s three h d'
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, L, H, Dh)
        q = q * cos[None, :, None] + _rotate_half(q) * sin[None, :, None]
        k = k * cos[None, :, None] + _rotate_half(k) * sin[None, :, None]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if cfg.causal:
            scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        o = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, L, -1)
        h = h + g1 * (o @ p("attn_out.weight").T)
        m = _ln(h, p("norm2.weight")) * (1 + sc2) + sh2
        m = F.gelu(m @ p("mlp.0.weight").T + p("mlp.0.bias"), approximate="tanh")
        h = h + g2 * (m @ p("mlp.2.weight").T + p("mlp.2.bias"))
    out = _ln(h, state["output_layer.norm_final.weight"])
    if c is not None:
        mod = (c @ state["output_layer.adaLN_modulation.weight"].T + state["output_layer.adaLN_modulation.bias"])[
            :, None
        ]
        shift, scale = mod.chunk(2, dim=2)
        out = out * (1 + scale) + shift
    return out @ state["output_layer.linear.weight"].T + state["output_layer.linear.bias"]


def upstream_block_diff_mask(n: int, block_size: int) -> torch.Tensor:
    """BD3-LM's ``block_diff_mask`` over ``[xt ; x0]`` (2n x 2n), transcribed from its three clauses."""
    q, kv = torch.arange(2 * n)[:, None], torch.arange(2 * n)[None, :]
    x0q, x0kv = q >= n, kv >= n
    bq = torch.where(x0q, (q - n) // block_size, q // block_size)
    bkv = torch.where(x0kv, (kv - n) // block_size, kv // block_size)
    return ((bq == bkv) & (x0q == x0kv)) | ((bq > bkv) & x0kv & ~x0q) | ((bq >= bkv) & x0kv & x0q)
