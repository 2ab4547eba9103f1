"""Algorithm 3 (the paper's appendix, "Energy-Guided Inference for DLLMs"): Uni-E decoding of a diffusion LLM
with an AR proxy.

The loop mirrors the algorithm.  Iterations ``n = 0..N-1`` walk the paper's grid ``t = 1 - n m / L`` with
``N = L / m`` (``L = gen_length``, ``m = tokens_per_step``), semi-autoregressively over blocks
(:func:`~unie.dllm.backbone.block_bounds`).  At each iteration:

1. one DLLM forward pass: ``logp_dlm = log p_theta(x0 | xt)`` ``(B, T, V)``;
2. **inside the window** ``t ∈ (1 - w, 1]`` (``n < w N``):
   a. ``K`` candidates ``x0^j`` ``(B, K, T)`` drawn from ``p_theta`` at ``temperature`` (float64 Gumbel-max; the
      released code's draw: all ``K`` at 0.1, the default) at the current block's positions (the only ones whose
      draw can matter: earlier positions are unmasked, later ones hold the greedy ``x0_hat``'s tokens in step c);
      with ``greedy_first`` candidate ``j = 0`` is ``x0_hat`` instead (then ``K = 1`` is the backbone's own
      decoder bit for bit); every candidate carries ``xt``'s unmasked tokens;
   b. ``xs^j``: the top-``m`` masked positions of the current block by the candidate's confidence under the
      backbone's rule (``low_confidence``: ``p_theta(x0^j_i)``, the paper's "highest logit"; ``entropy``: Dream's
      ``-H_i``) are revealed from ``x0^j``, the rest stay masked;
   c. energies ``E^j`` ``(B, K)`` (Ind-E, Inv-E or Uni-E, :mod:`unie.energy.energies`) **over the current
      block**, with the prompt and earlier blocks as the proxy's prefix: positions after the block are
      filled with ``x0^0``'s tokens for every candidate (identical across ``j``, so they are not ``M_t``) and the
      proxy's scores are cut at the block's end (``proxy.until(end)``); a word the block boundary splits is
      scored with the block that completes it (:mod:`unie.dllm.bridge`);
   d. ``j*`` by the ``selection`` rule (:func:`~unie.energy.energies.select`, shared with Algorithm 2):
      ``argmin_j E^j`` (the paper), a draw from ``softmax(-E/τ)`` (``resample``, importance sampling) or the
      proxy's favourite reveal (``proxy_rerank``: the released code's rule, no DLLM term); ``xt <- xs^{j*}``;
3. **outside the window**: the backbone's own rule (commit ``m`` tokens by confidence, greedy tokens).

The proxy is read through :class:`~unie.dllm.bridge.ProxyBridge` (decode the candidate to text, re-encode,
map the scores back to DLLM positions), also when both sides share a tokenizer, so the two backbones are
scored the same way.  All ``B·K`` candidates go through one batched proxy call per window iteration.
``ar_context: masked`` (``docs/decisions.md``) is the one reading without the bridge: a proxy that shares the
DLLM's tokenizer (the Dream-like model's word-level proxy) reads ``xt`` and each ``xs^j`` themselves, masks
included (:meth:`~unie.dllm.bridge.ProxyBridge.masked_logp`: one pass on ``xt``, one per candidate's ``xs``),
cut at the block's end as above (a causal proxy never reads the filled later positions for the block's scores);
with another tokenizer it is refused before any generation (:func:`proxy_preflight`).

What the energy had to act on is counted per row and window iteration (the stats): ``window_rows`` (row-iterations
inside the window), ``disagree_rows`` (those whose ``K`` candidates do not all reveal the same tokens at the same
positions: only there can any rule change the decode) and ``steered_rows`` (those where the chosen reveal differs
from candidate ``j = 0``'s: the greedy one's with ``greedy_first``, i.e. what the backbone alone would have
committed).  Where the window acts in the answer is counted per row over the final decode (:func:`window_counts`):
``window_reveals`` (tokens committed inside the window), ``window_padding`` (of those, positions after the answer's
first ``<eos>``: padding), ``answer_tokens`` (each answer's tokens up to and including its first ``<eos>``) and
``window_answer`` (of those, the ones committed inside the window).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.gumbel import gumbel_argmax_rows
from ..core.registry import ENERGIES, register_dllm_sampler
from ..energy.energies import SELECTIONS, select, selection_energy
from .backbone import DecodeOptions, block_bounds, commit_top, confidence, exit_early, normalise

# the proxy readings Algorithm 3 offers: the teacher-forced ones (through the tokenizer bridge) and `masked` (only for a
# proxy that shares the DLLM's tokenizer: proxy_preflight)
DLLM_CONTEXTS = ("teacher_forced", "teacher_forced_carry_over", "masked")
# the stats of what the energy acted on (how often it could choose) and where (how much of the answer, how much padding)
WINDOW_COUNTERS = (
    "window_rows",
    "disagree_rows",
    "steered_rows",
    "window_reveals",
    "window_padding",
    "answer_tokens",
    "window_answer",
)


@dataclass(frozen=True)
class DLLMEnergyOptions:
    """Algorithm 3's options; defaults from the paper (``K = 3``, ``w = 0.2``, ``argmin``; ``m`` is the decoder's
    ``tokens_per_step``) and, for the candidate draw, from the released code (``configs/llada_energy_eval.yaml``,
    ``dream_energy_eval.yaml``: every candidate sampled at temperature 0.1).  ``temperature``: of the drawn
    candidates; ``greedy_first``: candidate ``j = 0`` is the backbone's greedy ``x0_hat`` instead of a draw (so
    ``K = 1`` is the backbone's decoder; the toy rows' setting before the paper's regime, with ``temperature = 1``);
    ``selection``: ``argmin`` | ``resample`` | ``proxy_rerank`` (:data:`~unie.energy.energies.SELECTIONS`),
    ``selection_temperature``: ``τ`` of ``resample``."""

    energy: str = "uni"
    K: int = 3
    w: float = 0.2
    ar_context: str = "teacher_forced"
    temperature: float = 0.1
    greedy_first: bool = False
    selection: str = "argmin"
    selection_temperature: float = 1.0

    def __post_init__(self):
        if self.energy not in ENERGIES or ENERGIES[self.energy].scorer != "proxy":
            raise ValueError(f"Algorithm 3 needs a proxy energy (ind, inv, uni), got {self.energy!r}")
        if self.ar_context not in DLLM_CONTEXTS:
            raise ValueError(
                f"ar_context {self.ar_context!r} cannot be read from a DLLM's candidates; use one of "
                f"{', '.join(DLLM_CONTEXTS)} (masked: a proxy that shares the DLLM's tokenizer)"
            )
        if self.selection not in SELECTIONS:
            raise ValueError(f"unknown selection {self.selection!r}; known: {', '.join(SELECTIONS)}")
        if not isinstance(self.greedy_first, bool):
            raise ValueError(f"greedy_first must be true or false, got {self.greedy_first!r}")
        if self.K < 1 or not 0.0 <= self.w <= 1.0 or self.temperature <= 0 or self.selection_temperature <= 0:
            raise ValueError(
                f"need K >= 1, 0 <= w <= 1, temperature > 0, selection_temperature > 0; got K={self.K}, "
                f"w={self.w}, temperature={self.temperature}, "
                f"selection_temperature={self.selection_temperature}"
            )


def proxy_preflight(backbone, options: DLLMEnergyOptions, proxy=None) -> None:
    """Before any generation: ``ar_context: masked`` needs a proxy that shares the DLLM's tokenizer (a
    :class:`~unie.dllm.bridge.BridgeError`, a ``ValueError``, naming the option and both tokenizers otherwise)."""
    if options.ar_context == "masked" and proxy is not None:
        proxy.require_shared_tokenizer()


def in_window(n: int, N: int, w: float) -> bool:
    """``t_n = 1 - n/N ∈ (1 - w, 1]``  <=>  ``n < w N``."""
    return n < w * N


def window_counts(x: torch.Tensor, decided: torch.Tensor, prompt_len: int, eos_id: int | None) -> dict:
    """Where the window acted, over final decodes ``x`` ``(B, T)``: ``decided`` ``(B, T)`` bool marks the positions
    committed inside the window.  A row's answer is its generation region ``x[:, prompt_len:]`` up to and including
    the first ``<eos>`` (all of it without one); positions after it are padding.  Returns the integer counters
    ``window_reveals`` (Σ decided), ``window_padding`` (decided positions in the padding), ``answer_tokens`` (Σ answer
    lengths) and ``window_answer`` (decided positions in the answers); the padding share of the window's reveals is
    ``window_padding / window_reveals`` and the share of an average answer decided in the window
    ``window_answer / answer_tokens`` (:func:`unie.eval.metrics.window_shares`)."""
    gen, dec = x[:, prompt_len:], decided[:, prompt_len:]
    G = gen.shape[1]
    if eos_id is None:
        length = torch.full((gen.shape[0],), G, device=x.device)
    else:
        is_eos = gen == eos_id
        length = torch.where(
            is_eos.any(-1), is_eos.float().argmax(-1) + 1, torch.full_like(is_eos[:, 0], G, dtype=torch.long)
        )
    in_answer = torch.arange(G, device=x.device)[None] < length[:, None]
    return {
        "window_reveals": int(dec.sum()),
        "window_padding": int((dec & ~in_answer).sum()),
        "answer_tokens": int(length.sum()),
        "window_answer": int((dec & in_answer).sum()),
    }


@dataclass
class WindowStep:
    """What one window iteration of Algorithm 3 has, for ``B`` rows: the greedy ``x0_hat`` ``(B, T)``, the ``K``
    candidates ``x0`` and their reveals ``xs`` ``(B, K, T)`` (steps a-b), and the energies' inputs over the current
    block ``xt_b``, ``x0_b``, ``xs_b`` (step c: positions after the block hold ``x0_hat``'s tokens for every
    candidate)."""

    x0_hat: torch.Tensor
    x0: torch.Tensor
    xs: torch.Tensor
    xt_b: torch.Tensor
    x0_b: torch.Tensor
    xs_b: torch.Tensor


def window_step(
    x: torch.Tensor,
    logp_dlm: torch.Tensor,
    start: int,
    end: int,
    decode: DecodeOptions,
    options: "DLLMEnergyOptions",
    mask_id: int,
    generator,
) -> WindowStep:
    """Steps (a)-(b) of a window iteration and the energies' inputs (module doc) for states ``x`` ``(B, T)`` and the
    backbone's ``logp_dlm`` ``(B, T, V)`` on them; ``generator``: one, or one per row.  Shared by
    :func:`energy_decode` and the candidate tree (:mod:`unie.dllm.candidate_tree`), so a tree's nodes are the
    decoder's own."""
    K, m = options.K, decode.tokens_per_step
    pos = torch.arange(x.shape[1], device=x.device)
    x0_hat = logp_dlm.argmax(-1)  # the backbone's greedy x0
    masked = x == mask_id
    allowed = masked & (pos >= start) & (pos < end)  # masked positions of the current block
    # (a) K candidates x0^j (B, K, T) ~ p_theta at the temperature (with greedy_first j = 0 is x0_hat), drawn at the
    # current block's positions only (elsewhere a candidate carries xt's tokens or, after the block, x0_hat's)
    block_logits = logp_dlm[:, start:end] / options.temperature  # once for the draws
    first = [x0_hat] if options.greedy_first else []
    draws = first + [
        x0_hat.index_copy(1, pos[start:end], gumbel_argmax_rows(block_logits, generator).to(x.device))
        for _ in range(K - len(first))
    ]
    x0 = torch.where(masked[:, None], torch.stack(draws, dim=1), x[:, None])
    # (b) xs^j: top-m masked positions of the block by each candidate's confidence
    conf = confidence(logp_dlm, x0, decode.confidence)
    xs = commit_top(x[:, None].expand(-1, K, -1), x0, conf, allowed[:, None].expand(-1, K, -1), m)
    # (c)'s inputs: later positions hold x0^0's tokens for every candidate
    later = masked & (pos >= end)
    return WindowStep(
        x0_hat,
        x0,
        xs,
        torch.where(later, x0_hat, x),
        torch.where(later[:, None], x0_hat[:, None], x0),
        torch.where(later[:, None], x0_hat[:, None], xs),
    )


@torch.no_grad()
def energy_decode(
    backbone, proxy, x: torch.Tensor, decode: DecodeOptions, options: DLLMEnergyOptions, generator=None
) -> tuple[torch.Tensor, dict]:
    """Algorithm 3 on prompts ``x`` ``(B, T)`` (DLLM layout, ``gen_length`` trailing masks); ``generator``: one
    ``torch.Generator`` or a list of one per row (:func:`~unie.core.gumbel.gumbel_argmax_rows`).

    ``proxy``: the AR proxy as a :class:`~unie.dllm.bridge.ProxyBridge`.  Returns the decoded ``(B, T)`` and
    ``{"nfe": DLLM forwards, "proxy_forwards": ..., "window_iterations": ..., "window_rows": ...,
    "disagree_rows": ..., "steered_rows": ...}`` (the last three: module doc)."""
    proxy_preflight(backbone, options, proxy)
    x = x.clone()
    B, T = x.shape
    m, mask_id = decode.tokens_per_step, backbone.mask_id
    prompt_len = T - decode.gen_length
    N = decode.iterations
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(T, device=x.device)
    rows = torch.arange(B, device=x.device)
    proxy_before, window, nfe = proxy.forwards, 0, 0
    counts = {"window_rows": 0, "disagree_rows": 0, "steered_rows": 0}
    decided = torch.zeros_like(x, dtype=torch.bool)  # positions committed inside the window
    for n in range(N):
        start, end = block_bounds(prompt_len, decode, n)
        logp_dlm = normalise(backbone.logits(x), blocked).to(x.device)  # (B, T, V)
        nfe += 1
        x0_hat = logp_dlm.argmax(-1)  # the backbone's greedy x0
        masked = x == mask_id
        allowed = masked & (pos >= start) & (pos < end)  # masked positions of the current block
        if in_window(n, N, options.w):
            window += 1
            # (a)-(b) K candidates and their reveals; (c)'s inputs over the current block (one generator for the batch,
            # or one per row: DLLMDecoder passes one per request)
            step = window_step(x, logp_dlm, start, end, decode, options, mask_id, generator)
            xs, xt_b, x0_b, xs_b = step.xs, step.xt_b, step.x0_b, step.xs_b
            # (c) energies over the current block
            E = selection_energy(
                options.selection,
                options.energy,
                xt_b,
                x0_b,
                xs_b,
                logp_dlm,
                proxy.until(end),
                options.ar_context,
                mask_id,
            )
            # (d) j* by the selection rule (argmin_j E^j in the paper); xt <- xs^{j*}
            j_star = select(E, options.selection, options.selection_temperature, generator)
            decided |= xs[rows, j_star] != x
            x = xs[rows, j_star]
            counts["window_rows"] += B
            counts["disagree_rows"] += int((xs != xs[:, :1]).any(-1).any(-1).sum())
            counts["steered_rows"] += int((x != xs[:, 0]).any(-1).sum())
        else:
            x = commit_top(x, x0_hat, confidence(logp_dlm, x0_hat, decode.confidence), allowed, m)
        done = exit_early(x, prompt_len, decode, backbone)  # every row's completion final: the rest is <eos>
        if done is not None:
            x = done
            break
    counts.update(window_counts(x, decided, prompt_len, getattr(backbone, "eos_id", None)))
    return x, {"nfe": nfe, "proxy_forwards": proxy.forwards - proxy_before, "window_iterations": window, **counts}


@register_dllm_sampler("energy", DLLMEnergyOptions, needs_proxy=True, preflight=proxy_preflight)
def energy_sampler(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: DLLMEnergyOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """Registered form of :func:`energy_decode` (the +Ind/+Inv/+Uni-Energy rows of Table 3)."""
    return energy_decode(backbone, proxy, x, decoding, options, generator)
