"""DAWN, dependency-aware parallel decoding (``docs/baselines.md``; lizhuo-luo/DAWN,
``llada/generate.py::get_transfer_index_dawn``, ``gdllm_utils.py``): a Table 3 / Figure 4 baseline decoder.

Semi-autoregressive over blocks of ``block_length`` as the backbone's own decoder
(:func:`~unie.dllm.backbone.decode`), with no fixed step count: a block is decoded until it holds no mask
(``tokens_per_step`` is not read).  Notation of the DAWN paper, at iteration ``t`` with state ``y^(t)`` ``(B, T)``:

1. **One forward pass** gives the aligned logits and ``A`` ``(B, T, T)``, the softmax attention probabilities
   of the last ``attn_layers`` layers averaged over heads and layers (row ``i`` = query, column ``j`` = key;
   :meth:`~unie.dllm.backbone.DLLM.logits_and_attention`).
2. **Dependency graph** (:func:`dependency_graph`): sink filtering (a key ``j`` whose column mean
   ``Ā_j = (1/T) Σ_i A_ij`` exceeds ``τ_sink`` is zeroed), the diagonal zeroed, and an edge ``j → i`` ("``i``
   depends on ``j``") iff ``A_ij ≥ τ_edge``.
3. **Confidence**: ``x̂0 = argmax p_θ`` (greedy, temperature 0) and ``c_i = p_θ(x̂0_i | y^(t))`` at *every*
   position, committed ones included (an anchor's confidence is the model's current one).
4. **Selection**, over ``M^(t)`` = the masked positions of the current block:

   * ``U_conf = {i ∈ M^(t) : c_i ≥ τ_high}``;
   * anchors = unmasked positions (prompt or committed) not after the current block with ``c_j ≥ τ_high``;
     ``I^(t)`` = positions with an edge from an anchor; ``U_a = {i ∈ M^(t) ∩ I^(t) : c_i ≥ τ_induce}``;
     ``U_anchor = U_conf ∪ U_a``;
   * **conflict-based scheduling** (the paper's Algorithm 1): conflicts are the edges of the graph regardless of
     direction; ``X = U_anchor ∪ N(U_anchor)``; the candidates ``R = {i ∈ M^(t) : c_i ≥ τ_low} \\ X``; ``U_conflict``
     = the greedy maximal independent set of ``R`` (:func:`greedy_mis`: take the most confident candidate,
     drop its conflicting neighbours, repeat until no candidate is left);
   * commit ``x̂0`` at ``U_anchor ∪ U_conflict``; if that is empty, at the single most confident position of
     ``M^(t)`` (ties: lowest position).

Readings where the official code and the paper differ (the paper is followed, and each row is independent of
the others in a batch):

* ``X`` uses the **union** ``U_conf ∪ U_a`` and conflicts in both directions (the paper's Algorithm 1 and §4.3);
  the code excludes only positions that attend to a position in ``U_a ∩ U_conf``.
* The greedy MIS stops when no candidate is left (the paper); the code keeps picking until it has as many
  positions as there were candidates, which then selects non-candidate positions (``argmax`` of an all
  ``-inf`` row).
* The code skips conflict scheduling for the whole batch when one row has no candidate, and forces the top-1
  into every row when one row's set is empty; here both are per row.
* The anchor threshold is ``τ_high`` (the code hard-codes 0.9, its ``τ_high``).
* For a shifted (Dream-like) backbone ``A`` is not re-aligned (DAWN's Dream code does not shift it either).

Thresholds ``τ_sink``, ``τ_edge`` (:class:`DAWNOptions`) are re-tuned for our short sequences; ``attn_layers`` is
1 (the last of our 3 layers) where LLaDA-8B uses its last 4 of 32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.registry import register_dllm_sampler
from .backbone import DecodeOptions, commit_top, confidence, exit_early, normalise


@dataclass(frozen=True)
class DAWNOptions:
    """DAWN's thresholds (the single source of their defaults).

    * ``tau_high`` 0.9, ``tau_low`` 0.7, ``tau_induce`` 0.7: the Uni-E paper's settings ("high 0.9, low 0.7,
      anchor 0.7"); a value above 1 switches the rule off (no probability reaches it).
    * ``tau_sink``, ``tau_edge``: LLaDA-8B's 0.01 / 0.07 are set for sequences of about 300-500 positions, where
      the mean attention weight is ``1/T ≈ 0.002-0.003``, so ``τ_sink ≈ 4/T`` and ``τ_edge ≈ 25/T``.  Our
      sequences have 40-80 positions (the trained tiny checkpoints: LLaDA-like ``T = 77``, Dream-like ``T = 59``),
      where 0.01 is below the average column mean ``1/T`` and marks half the columns as sinks (72-87 % of the
      mass; almost no edge is left).  Defaults **0.05 / 0.1**, measured on those two checkpoints (``d = 96``,
      3 layers, ``A`` of the last layer, 16 test prompts of each of the 7 toy tasks, every DAWN iteration):
      ``τ_sink = 0.05 ≈ 3-4/T`` (LLaDA's ratio to ``1/T``) marks 0.5-2 % of the columns (3-9 % of the mass:
      ``<bos>``, "question", ":", ``<mask>``); ``τ_edge = 0.1`` leaves a masked query of the block a median of 2
      (LLaDA-like; mean 2.2, none for 2 %) or 1 (Dream-like; mean 1.2) edges, at most 6.  Scaling 0.07 by
      the length ratio (≈0.3-0.4) would leave no edge at all: attention rows of these models rarely put more
      than 0.2 on one key.
    * ``attn_layers``: how many last layers ``A`` averages (LLaDA-8B: 4 of 32; our models: 1 of 3).

    Tokens are greedy (temperature 0, DAWN's and LLaDA's evaluation setting)."""

    tau_high: float = 0.9
    tau_low: float = 0.7
    tau_induce: float = 0.7
    tau_sink: float = 0.05
    tau_edge: float = 0.1
    attn_layers: int = 1

    def __post_init__(self):
        for name in ("tau_high", "tau_low", "tau_induce", "tau_sink", "tau_edge"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or not v > 0:
                raise ValueError(f"DAWN option {name} must be a number > 0, got {v!r}")
        a = self.attn_layers
        if isinstance(a, bool) or not isinstance(a, int) or a < 1:
            raise ValueError(f"DAWN option attn_layers must be an integer >= 1, got {a!r}")


def current_block(
    x: torch.Tensor, mask_id: int, prompt_len: int, block_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, ``[start, end)`` ``(B,)`` of the first block of the generation region that still holds a mask
    (a finished row gets the empty block ``[T, T)``)."""
    B, T = x.shape
    gen = x[:, prompt_len:] == mask_id  # (B, G)
    first = torch.where(gen.any(-1), gen.float().argmax(-1), torch.full((B,), T - prompt_len, device=x.device))
    start = prompt_len + (first // block_length) * block_length
    return start, torch.clamp(start + block_length, max=T)


def dependency_graph(A: torch.Tensor, tau_sink: float, tau_edge: float) -> torch.Tensor:
    """DAWN's dependency graph from the attention ``A`` ``(B, T, T)`` (query ``i``, key ``j``).

    Keys with column mean ``(1/T) Σ_i A_ij > tau_sink`` (attention sinks) and the diagonal are zeroed; returns
    the bool ``E`` ``(B, T, T)`` with ``E[b, i, j]`` = edge ``j → i`` ("``i`` depends on ``j``") iff
    ``A_ij ≥ tau_edge``."""
    sink = A.mean(dim=1) > tau_sink  # (B, T) over keys
    A = A.masked_fill(sink[:, None, :], 0.0)
    eye = torch.eye(A.shape[-1], dtype=torch.bool, device=A.device)
    return A.masked_fill(eye, 0.0) >= tau_edge


def greedy_mis(conflict: torch.Tensor, candidates: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Greedy maximal independent set per row: repeatedly take the candidate of highest ``score`` (ties: lowest
    position) and remove it and its neighbours, until no candidate is left.

    ``conflict`` bool ``(B, T, T)`` symmetric (``i`` and ``j`` conflict), ``candidates`` bool ``(B, T)``,
    ``score`` ``(B, T)``; returns the bool ``(B, T)`` set: no two chosen positions conflict, and every candidate
    not chosen conflicts with a chosen one."""
    B = candidates.shape[0]
    rows = torch.arange(B, device=candidates.device)
    left = candidates.clone()
    chosen = torch.zeros_like(candidates)
    neg_inf = torch.tensor(-math.inf, dtype=torch.float64, device=score.device)
    while bool(left.any()):
        has = left.any(-1)  # (B,)
        best = torch.where(left, score.double(), neg_inf).argmax(-1)  # first maximum: lowest position
        r, b = rows[has], best[has]
        chosen[r, b] = True
        left[r, b] = False
        left[r] &= ~conflict[r, b]
    return chosen


@torch.no_grad()
def attention_preflight(backbone, options: DAWNOptions, proxy=None) -> None:
    """Before any generation: the backbone must give ``options.attn_layers`` layers of attention probabilities
    (one forward over one row of two masks; a ``TypeError``/``ValueError`` naming the problem otherwise)."""
    if not hasattr(backbone, "logits_and_attention"):
        raise TypeError(
            f"DAWN needs attention probabilities: {type(backbone).__name__} has no logits_and_attention(x, n_layers)"
        )
    x = torch.full((1, 2), backbone.mask_id, dtype=torch.long)
    _, A = backbone.logits_and_attention(x, options.attn_layers)
    if tuple(A.shape) != (1, 2, 2):
        raise ValueError(f"DAWN: attention probabilities of shape {tuple(A.shape)} for one row of 2 positions")


@register_dllm_sampler("dawn", DAWNOptions, preflight=attention_preflight)
@torch.no_grad()
def dawn_decode(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: DAWNOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """DAWN decoding of prompts ``x`` ``(B, T)`` (DLLM layout, ``decoding.gen_length`` trailing masks).

    ``backbone`` needs ``logits_and_attention(x, n_layers)`` (:class:`~unie.dllm.backbone.DLLM`).  Each row walks
    its own blocks and commits its own sets, so a row's result does not depend on the other rows.  Returns the
    decoded ``(B, T)`` and ``{"nfe": forwards, "tokens_per_step": generated tokens / (B · nfe)}`` (rows that
    finished early count as idle in the mean) plus the tokens committed by each rule, summed over rows
    (``committed_conf``, ``committed_anchor``, ``committed_conflict``, ``committed_fallback``)."""
    if not hasattr(backbone, "logits_and_attention"):
        raise TypeError(
            f"DAWN needs attention probabilities: {type(backbone).__name__} has no logits_and_attention(x, n_layers)"
        )
    x = x.clone()
    T = x.shape[1]
    mask_id = backbone.mask_id
    prompt_len = T - decoding.gen_length
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(T, device=x.device)
    o = options
    nfe = 0
    counts = dict.fromkeys(("committed_conf", "committed_anchor", "committed_conflict", "committed_fallback"), 0)
    while bool((x[:, prompt_len:] == mask_id).any()):
        start, end = current_block(x, mask_id, prompt_len, decoding.block_length)
        logits, A = backbone.logits_and_attention(x, o.attn_layers)
        nfe += 1
        logp = normalise(logits, blocked).to(x.device)  # (B, T, V)
        E = dependency_graph(A.to(x.device).float(), o.tau_sink, o.tau_edge)  # (B, T, T): E[b, i, j] = j -> i
        x0_hat = logp.argmax(-1)
        c = confidence(logp, x0_hat, "low_confidence")  # p_theta(x0_hat_i | y_t) at every position
        masked = x == mask_id
        M = masked & (pos >= start[:, None]) & (pos < end[:, None])  # masked positions of the current block
        # anchor-guided decoding
        u_conf = M & (c >= o.tau_high)
        anchors = ~masked & (pos < end[:, None]) & (c >= o.tau_high)
        induced = (E & anchors[:, None, :]).any(-1)  # an edge j -> i from an anchor j
        u_a = M & induced & (c >= o.tau_induce) & ~u_conf
        u_anchor = u_conf | u_a
        # conflict-based scheduling: greedy MIS over the remaining candidates in the undirected graph
        conflict = E | E.transpose(1, 2)
        near_anchor = (conflict & u_anchor[:, None, :]).any(-1)
        candidates = M & (c >= o.tau_low) & ~u_anchor & ~near_anchor
        u_c = greedy_mis(conflict, candidates, c)
        commit = u_anchor | u_c
        x = torch.where(commit, x0_hat, x)
        # nothing selected in a row: its single most confident masked position of the block
        fallback = M & ~commit.any(-1, keepdim=True)
        x_new = commit_top(x, x0_hat, c, fallback, 1)
        counts["committed_fallback"] += int((x_new != x).sum())
        x = x_new
        counts["committed_conf"] += int(u_conf.sum())
        counts["committed_anchor"] += int(u_a.sum())
        counts["committed_conflict"] += int(u_c.sum())
        done = exit_early(x, prompt_len, decoding, backbone)
        if done is not None:
            x = done
            break
    return x, {"nfe": nfe, "tokens_per_step": decoding.gen_length / max(nfe, 1), **counts}
