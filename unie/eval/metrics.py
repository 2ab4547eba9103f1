"""Metric conventions (``../shared/spec/uni-e.md`` §Metrics).

* Perplexity: ``exp(sum NLL / sum tokens)`` pooled over all sequences (corpus level, not a mean of
  per-sequence perplexities), for both the likelihood bound of Table 1 and generative perplexity.
* Entropy: per-sample unigram entropy of token ids in **bits**, averaged over samples (the paper's
  column follows EDLM, which uses log2).
"""

from __future__ import annotations

import math

import torch


def ppl_with_se(nll: torch.Tensor, tokens: torch.Tensor) -> dict:
    """Pooled perplexity of per-sequence NLLs ``(N,)`` over ``tokens`` ``(N,)`` with a delta-method s.e.

    Returns nats/token, its standard error, perplexity and the tokens/sequences counted."""
    nll, tokens = nll.double(), tokens.double()
    total_nll, total_tok = nll.sum().item(), tokens.sum().item()
    per_tok = total_nll / total_tok
    n = nll.numel()
    # ratio estimator variance: Var(sum nll - r * sum tok) / (sum tok)^2
    resid = nll - per_tok * tokens
    se = math.sqrt(resid.var(unbiased=True).item() * n) / total_tok if n > 1 else float("nan")
    return {"nll_per_token": per_tok, "nll_se": se, "ppl": math.exp(per_tok), "tokens": int(total_tok),
            "sequences": n}


def unigram_entropy_bits(x: torch.Tensor) -> torch.Tensor:
    """Per-sample unigram entropy of token ids in bits. ``(N, L) -> (N,)``."""
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for i, row in enumerate(x):
        _, counts = torch.unique(row, return_counts=True)
        p = counts.double() / counts.sum()
        out[i] = -(p * torch.log2(p)).sum()
    return out


def mean_entropy_bits(x: torch.Tensor) -> float:
    return unigram_entropy_bits(x).mean().item()
