"""One transformer block stack used two ways: a bidirectional denoiser (masked diffusion) and a
causal autoregressive model.  Pre-LN blocks, rotary position embeddings, PyTorch SDPA attention,
optional adaLN time conditioning (SEDD, Duo), an optional arbitrary attention mask (BD3-LM,
DCD's causal pass) and a KV cache for AR sampling (a growing per-layer dict, or a preallocated
:class:`KVCache` whose fixed-shape mode can be captured as a CUDA graph).  On request (``return_attn=n``) the
softmax attention probabilities of the last ``n`` layers are computed alongside SDPA (DAWN's dependency proxy);
the default path never computes them.  Rows that share a prefix (a proxy reading a prompt's candidates) can be read
with that prefix computed once (:meth:`Transformer.forward_shared`, :func:`prefix_groups`).

Shapes: tokens ``(B, L)`` int64 -> logits ``(B, L, V)`` float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.options import ModelConfig
from ..core.registry import BACKBONES


def rotary_tables(positions: torch.Tensor, head_dim: int, base: float = 10000.0):
    """cos/sin tables ``(L, head_dim)`` for integer ``positions`` ``(L,)`` (``(B, L, head_dim)`` for each row's own
    positions ``(B, L)``): the ``head_dim/2`` frequencies, each repeated for both halves of the head (the "rotate
    half" pairing of GPT-NeoX / Llama)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.float()[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(B, H, L, Dh)`` by the position angles, pairing dimension ``i`` with ``i + Dh/2``
    (3x faster on a CPU than interleaved pairs, which need a stack and a copy).  ``cos``/``sin`` broadcast
    against ``x`` (``(L, Dh)`` here; ``(L, 1, Dh)`` for the ``(B, L, 2H, Dh)`` layout of :class:`Attention`).
    Every element is ``x * cos + rot(x) * sin`` computed in the promoted dtype and rounded to ``x``'s dtype once,
    in any layout."""
    x1, x2 = x.chunk(2, dim=-1)
    # both products in the promoted dtype (float32 tables): rounding a half-precision product first would differ
    return (x * cos).add_(torch.cat([-x2, x1], dim=-1) * sin).type_as(x)


def attention_probs(q: torch.Tensor, k: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
    """``softmax(q k^T / sqrt(Dh) + mask)`` ``(B, H, L, L_k)`` float32, the probabilities SDPA applies to ``v``.

    ``q`` ``(B, H, L, Dh)``, ``k`` ``(B, H, L_k, Dh)``; ``attn_mask`` bool (True = may attend) or additive float,
    broadcastable to ``(B, H, L, L_k)``; ``is_causal``: key ``j <= `` query ``i`` (SDPA's top-left alignment)."""
    s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.float()
    return torch.softmax(s, dim=-1)


class KVCache:
    """A preallocated key/value cache for AR decoding: per layer ``(B, H, max_len, Dh)`` keys and values,
    allocated on the first write in the dtype of the keys (float32, or bfloat16 under autocast), filled in
    place (no concatenation per token).

    Two modes:

    * **eager** (``pos=None``): ``n`` positions are filled; a call with ``L`` new tokens writes slots
      ``n .. n + L - 1`` and attends over the first ``n + L`` slots (a slice: the same keys and values as the
      per-layer dict cache that concatenates, and on a CPU the same logits, bit for bit; tested).
    * **fixed shape** (``pos`` a ``(1,)`` int64 tensor on the device): one new token at position ``pos``,
      attention over all ``max_len`` slots with the slots after ``pos`` masked out.  Every shape and address
      is the same at every step, so the step can be captured once as a CUDA graph and replayed
      (:meth:`unie.methods.ar.ARModel.sample` on a GPU)."""

    def __init__(self, n_layers: int, max_len: int, pos: torch.Tensor | None = None):
        self.n_layers, self.max_len, self.pos = n_layers, max_len, pos
        self.k = self.v = None
        self.n = 0

    def update(self, i: int, k: torch.Tensor, v: torch.Tensor):
        """Store layer ``i``'s new keys/values ``(B, H, L, Dh)``; returns ``(keys, values, attn_mask)`` to attend
        over (``attn_mask`` None in eager mode, bool ``(1, max_len)`` in fixed-shape mode)."""
        if self.k is None:
            B, H, _, Dh = k.shape
            self.k = torch.zeros(self.n_layers, B, H, self.max_len, Dh, dtype=k.dtype, device=k.device)
            self.v = torch.zeros_like(self.k)
        if self.pos is not None:
            self.k[i].index_copy_(2, self.pos, k)
            self.v[i].index_copy_(2, self.pos, v)
            keep = torch.arange(self.max_len, device=k.device) <= self.pos  # (max_len,): the past and pos
            return self.k[i], self.v[i], keep[None, :]
        n, L = self.n, k.shape[2]
        if n + L > self.max_len:
            raise ValueError(f"KV cache full: {n} + {L} positions > max_len {self.max_len}")
        self.k[i, :, :, n : n + L] = k
        self.v[i, :, :, n : n + L] = v
        return self.k[i, :, :, : n + L], self.v[i, :, :, : n + L], None


def cached_keys(cache: dict | None, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AR decoding with a dict KV cache (one per layer): the new keys/values ``(B, H, L, Dh)`` appended to the
    cached ones along the sequence axis, stored back, and returned; no cache: ``k, v`` unchanged."""
    if cache is not None:
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
    return k, v


def causal_mask(causal: bool, attn_mask, L: int, L_k: int, device) -> tuple[torch.Tensor | None, bool]:
    """``(attn_mask, is_causal)`` for SDPA over ``L`` queries and ``L_k`` keys: SDPA's own causal mask when the
    keys are the queries; cached decoding of several new tokens (``L_k > L``): causal over the new block, full
    over the past.  An explicit ``attn_mask`` is kept as it is."""
    is_causal = causal and attn_mask is None and L_k == L and L > 1
    if causal and attn_mask is None and L_k != L and L > 1:
        attn_mask = torch.ones(L, L_k, dtype=torch.bool, device=device).tril(diagonal=L_k - L)
    return attn_mask, is_causal


@dataclass(frozen=True)
class PrefixGroups:
    """How :meth:`Transformer.forward_shared` reads ``N`` rows: ``singles`` ``(S,)`` rows read whole; ``rows``
    ``(R,)`` rows read as their group's prefix and their own rest, ``group`` ``(R,)`` each one's group, ``first``
    ``(G,)`` a row of each group (its first ``plen`` tokens are the group's prefix), ``plen`` ``(G,)`` the prefix
    lengths (each below the rows' width, so that every row keeps a token of its own)."""

    singles: torch.Tensor
    rows: torch.Tensor
    group: torch.Tensor
    first: torch.Tensor
    plen: torch.Tensor


def prefix_groups(x: torch.Tensor, min_saving: float = 0.2) -> PrefixGroups | None:
    """Groups of the rows of ``x`` ``(N, W)`` that start with the same tokens, or None when reading them so would
    compute more than ``1 - min_saving`` of the ``N * W`` token positions of a whole read.

    The rows are sorted; a group is a run of sorted rows whose neighbours share at least ``t`` tokens, its prefix
    the tokens all of them share (at most ``W - 1``); a row in no run of two is read whole.  ``t`` is the one of the
    neighbours' shared lengths that minimises the positions the three padded reads compute (``S * W`` whole rows,
    ``G * max(plen)`` prefixes, ``R * (W - min(plen))`` rests)."""
    N, W = x.shape
    if N < 2 or W < 2:
        return None
    a = x.cpu().numpy()
    order = np.lexsort(a.T[::-1])  # lexicographic: by position 0, then 1, ...
    s = a[order]
    diff = s[1:] != s[:-1]
    lcp = np.minimum(np.where(diff.any(1), diff.argmax(1), W), W - 1)  # (N - 1,): tokens sorted neighbours share
    best = None
    for t in np.unique(lcp[lcp >= 1]):
        cut = lcp < t  # between sorted rows k and k + 1
        seg = np.concatenate([[0], np.cumsum(cut)])  # (N,): each sorted row's run
        sizes = np.bincount(seg)
        plen = np.full(len(sizes), W - 1, dtype=np.int64)
        np.minimum.at(plen, seg[1:][~cut], lcp[~cut])
        multi = sizes >= 2
        R = int(sizes[multi].sum())
        cost = (N - R) * W + int(multi.sum()) * int(plen[multi].max()) + R * (W - int(plen[multi].min()))
        if best is None or cost < best[0]:
            best = (cost, seg, plen, multi)
    if best is None or best[0] > (1.0 - min_saving) * N * W:
        return None
    _, seg, plen, multi = best
    in_group = multi[seg]
    ids = np.full(len(multi), -1, dtype=np.int64)
    ids[multi] = np.arange(int(multi.sum()))
    starts = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))  # each run's first sorted row
    return PrefixGroups(
        singles=torch.as_tensor(order[~in_group]),
        rows=torch.as_tensor(order[in_group]),
        group=torch.as_tensor(ids[seg[in_group]]),
        first=torch.as_tensor(order[starts[multi]]),
        plen=torch.as_tensor(plen[multi]),
    )


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = cfg.dropout

    def forward(self, h, cos, sin, causal: bool, attn_mask=None, cache=None, probs: list | None = None):
        """``probs``: when a list, the softmax attention probabilities ``(B, H, L, L_k)`` float32 (query ``i``
        over key ``j``, before dropout) are appended to it; SDPA still computes the output."""
        B, L, D = h.shape
        H, Dh = self.n_heads, self.head_dim
        qkv = self.qkv(h).view(B, L, 3, H, Dh)
        # q and k rotated together on a contiguous (B, L, 2H, Dh) copy, then viewed as (B, H, L, Dh): the same
        # values as rotating the permuted q and k one by one, ~1.5x faster on a CPU (strided broadcasts are slow)
        qk = apply_rotary(qkv[:, :, :2].reshape(B, L, 2 * H, Dh), cos.unsqueeze(-2), sin.unsqueeze(-2))
        q, k = qk.view(B, L, 2, H, Dh).permute(2, 0, 3, 1, 4)
        v = qkv[:, :, 2].transpose(1, 2)
        if isinstance(cache, tuple):  # a preallocated KVCache and this layer's index
            k, v, kv_mask = cache[0].update(cache[1], k, v)
            if kv_mask is not None:
                attn_mask = kv_mask if attn_mask is None else attn_mask & kv_mask
        else:
            k, v = cached_keys(cache, k, v)
        attn_mask, is_causal = causal_mask(causal, attn_mask, L, k.shape[2], h.device)
        if probs is not None:
            probs.append(attention_probs(q, k, attn_mask, is_causal))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(out.transpose(1, 2).reshape(B, L, D))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, elementwise_affine=cfg.cond_dim == 0)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, elementwise_affine=cfg.cond_dim == 0)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),  # exact (erf): the tanh approximation is 4x slower on a CPU
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )
        self.drop = nn.Dropout(cfg.dropout)
        # adaLN modulation (DiT): shift/scale/gate for attention and MLP, zero-initialised
        self.ada = None
        if cfg.cond_dim:
            self.ada = nn.Linear(cfg.cond_dim, 6 * cfg.d_model)
            nn.init.zeros_(self.ada.weight)
            nn.init.zeros_(self.ada.bias)

    def forward(self, h, cos, sin, causal, c=None, attn_mask=None, cache=None, probs: list | None = None):
        if self.ada is None:
            h = h + self.drop(self.attn(self.ln1(h), cos, sin, causal, attn_mask, cache, probs))
            return h + self.drop(self.mlp(self.ln2(h)))
        s1, sc1, g1, s2, sc2, g2 = self.ada(c)[:, None, :].chunk(6, dim=-1)
        x = self.ln1(h) * (1 + sc1) + s1
        h = h + (1 + g1) * self.drop(self.attn(x, cos, sin, causal, attn_mask, cache, probs))
        x = self.ln2(h) * (1 + sc2) + s2
        return h + (1 + g2) * self.drop(self.mlp(x))


def timestep_embedding(sigma: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of the noise level ``sigma`` ``(B,)`` -> ``(B, dim)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=sigma.device, dtype=torch.float32) / half)
    args = sigma.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = F.pad(emb, (0, 1))
    return emb


@BACKBONES.register("transformer")
class Transformer(nn.Module):
    """Token embedding -> ``n_layers`` pre-LN blocks -> final LN -> untied output head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.cond = None
        if cfg.cond_dim:
            self.cond = nn.Sequential(
                nn.Linear(cfg.cond_dim, cfg.cond_dim), nn.SiLU(), nn.Linear(cfg.cond_dim, cfg.cond_dim)
            )
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear) and m.weight.abs().sum() > 0:
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def device(self):
        return self.embed.weight.device

    def forward(self, x: torch.Tensor | None = None, **kwargs):
        """Logits ``(B, L, V)`` float32: the output head on :meth:`hidden` (same arguments).  With
        ``return_attn=n > 0``: ``(logits, probs)``, ``probs`` as :meth:`hidden` returns them."""
        if kwargs.get("return_attn", 0):
            h, probs = self.hidden(x, **kwargs)
            return self.head(h).float(), probs
        kwargs.pop("return_attn", None)
        return self.head(self.hidden(x, **kwargs)).float()

    def hidden(
        self,
        x: torch.Tensor | None = None,
        sigma: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: list | None = None,
        causal: bool | None = None,
        return_attn: int = 0,
    ):
        """Final hidden states ``(B, L, d_model)`` (after the last LayerNorm).

        Args:
            x: tokens ``(B, L)`` int64 (or ``inputs_embeds`` ``(B, L, d_model)``, e.g. Duo's soft inputs).
            sigma: noise level ``(B,)``, required iff the model was built with ``cond_dim > 0``.
            attn_mask: bool ``(L, L_k)`` or ``(B, 1, L, L_k)``, True = may attend (overrides ``causal``).
            positions: rotary positions ``(L,)``, or ``(B, L)`` for each row its own (default ``0..L-1``, offset by
                the cache length).
            cache: list of per-layer dicts for AR decoding (filled in place, keys concatenated), or a
                preallocated :class:`KVCache` (:meth:`static_cache`).
            causal: override the configured attention direction (DCD's causal pass of a denoiser).
            return_attn: ``n > 0`` also returns the softmax attention probabilities of the last ``n`` layers
                (all of them if ``n >= n_layers``), a list of ``(B, H, L, L_k)`` float32 tensors, shallowest
                first: ``(hidden, probs)``.  They are computed alongside SDPA (which still produces the output),
                so the hidden states are those of the default path; ``0`` (default) computes nothing extra.
        """
        h = self.embed(x) if inputs_embeds is None else inputs_embeds
        L = h.shape[1]
        causal = self.cfg.causal if causal is None else causal
        static = isinstance(cache, KVCache)
        if positions is None:
            if static:
                start = cache.n if cache.pos is None else None
                if start is None:
                    positions = cache.pos
            else:
                start = cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0
            if positions is None:
                positions = torch.arange(start, start + L, device=h.device)
        cos, sin = rotary_tables(positions, self.cfg.d_model // self.cfg.n_heads)
        c = None
        if self.cond is not None:
            if sigma is None:
                raise ValueError("this model is time-conditioned: pass sigma")
            c = F.silu(self.cond(timestep_embedding(sigma, self.cfg.cond_dim)))
        if return_attn < 0:
            raise ValueError(f"return_attn must be >= 0, got {return_attn}")
        first = len(self.blocks) - return_attn if return_attn else len(self.blocks)
        probs = [] if return_attn else None
        for i, blk in enumerate(self.blocks):
            layer_cache = (cache, i) if static else None if cache is None else cache[i]
            h = blk(h, cos, sin, causal, c, attn_mask, layer_cache, probs if i >= first else None)
        if static and cache.pos is None:
            cache.n += L
        return (self.ln_f(h), probs) if return_attn else self.ln_f(h)

    def forward_shared(self, x: torch.Tensor, min_saving: float = 0.2) -> torch.Tensor:
        """:meth:`forward` of a causal model's rows ``x`` ``(N, W)``, each shared prefix read once
        (:func:`prefix_groups`): a group's prefix is one row of a first pass (its keys and values kept), each of its
        rows' own rest a row of a second pass at the row's own positions, attending to its group's prefix and
        causally to itself; a row in no group is read whole.  Logits ``(N, W, V)`` float32, mathematically those of
        :meth:`forward` (position ``i`` of a causal model reads positions ``<= i`` only), to float rounding (other
        matrix shapes, another attention kernel: about 1e-5 here, a test bounds it).  :meth:`forward` itself when
        no prefix is worth it, and for a bidirectional or time-conditioned model."""
        if not self.cfg.causal or self.cond is not None:
            return self(x)
        plan = prefix_groups(x, min_saving)
        if plan is None:
            return self(x)
        N, W = x.shape
        dev = x.device
        singles, rows, group, first, plen = (
            t.to(dev) for t in (plan.singles, plan.rows, plan.group, plan.first, plan.plen)
        )
        P, S = int(plen.max()), W - int(plen.min())
        cache = self.new_cache()
        h_pre = self.hidden(x[first, :P], cache=cache)  # (G, P, d): the first P tokens of a member, causal
        p_r = plen[group]  # (R,): each row's prefix length
        at = p_r[:, None] + torch.arange(S, device=dev)  # (R, S): a rest's positions (from W on: padding, never read)
        sees = torch.cat(
            [
                (torch.arange(P, device=dev)[None, :] < p_r[:, None])[:, None, :].expand(-1, S, -1),
                torch.ones(S, S, dtype=torch.bool, device=dev).tril()[None].expand(len(p_r), -1, -1),
            ],
            dim=-1,
        )[:, None]  # (R, 1, S, P + S): its group's prefix, then itself causally
        rest_cache = [{"k": c["k"][group], "v": c["v"][group]} for c in cache]
        h_rest = self.hidden(x[rows].gather(1, at.clamp(max=W - 1)), positions=at, cache=rest_cache, attn_mask=sees)
        h = torch.empty(N, W, h_pre.shape[-1], dtype=h_pre.dtype, device=dev)
        if len(singles):
            h[singles] = self.hidden(x[singles])
        i = torch.arange(W, device=dev)[None]
        both = torch.cat([h_pre[group], h_rest], dim=1)  # (R, P + S, d)
        src = torch.where(i < p_r[:, None], i, P + i - p_r[:, None])  # (R, W): from the prefix, then the rest
        h[rows] = both.gather(1, src[..., None].expand(-1, -1, both.shape[-1]))
        return self.head(h).float()

    def new_cache(self) -> list:
        return [dict() for _ in self.blocks]

    def static_cache(self, max_len: int, pos: torch.Tensor | None = None) -> KVCache:
        """A preallocated :class:`KVCache` of ``max_len`` positions (fixed-shape mode when ``pos`` is given)."""
        return KVCache(len(self.blocks), max_len, pos)
