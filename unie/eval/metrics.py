"""Metric conventions (``../shared/spec/uni-e.md`` §Metrics).

* Perplexity: ``exp(sum NLL / sum tokens)`` pooled over all sequences (corpus level, not a mean of
  per-sequence perplexities), for both the likelihood bound of Table 1 and generative perplexity.
* Entropy: per-sample unigram entropy of token ids in **bits**, averaged over samples (the paper's
  column follows EDLM, which uses log2).
"""

from __future__ import annotations

import math

import numpy as np
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


def entropy_se_bits(x: torch.Tensor) -> float:
    """The standard error of :func:`mean_entropy_bits` over the samples: ``sd / sqrt(N)`` of the per-sample entropies
    (sample sd, ``ddof = 1``); NaN for fewer than 2 samples.  ``(N, L) -> float``."""
    h = unigram_entropy_bits(x)
    return float(h.std(unbiased=True) / h.numel() ** 0.5) if h.numel() > 1 else float("nan")


def paired_mean_se(d) -> tuple[float, float]:
    """``(mean(d), sd(d) / sqrt(n))`` of paired per-item differences ``d`` (sample sd, ``ddof = 1``): a change and its
    paired standard error; the s.e. is NaN for fewer than 2 items."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return (float(d.mean()) if len(d) else float("nan")), float("nan")
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def paired_effect(row: dict, base: dict, tasks: list[str]) -> dict:
    """A decoder row against its backbone on the same items: per task and over the tasks' average.

    ``row``, ``base``: ``task -> {item id: (score, completion text)}`` (lm-eval's per-sample records; ``score`` in
    [0, 1]).  Per task, over the ``n`` items both have: ``delta`` = mean of ``d_i = score_row_i - score_base_i``
    (x 100, points), ``se`` = ``sd(d) / sqrt(n)`` (sample sd, x 100: the paired s.e., far below either accuracy's
    own s.e. when the rows agree on most items), ``changed`` = share of items whose completion text differs.
    ``avg``: the change of the tasks' *average* accuracy (each task weighted 1/T, as Table 3's Avg. column):
    ``delta = Σ_t delta_t / T``, ``se = sqrt(Σ_t se_t²) / T`` (the tasks are disjoint item sets, so their
    paired differences are independent); ``changed`` pools every item.  ``detectable`` = ``2 se`` of the average:
    the smallest change of the average that this sample resolves at 2 s.e. (0 if no item changed)."""
    per_task, n_all, changed_all = {}, 0, 0
    for task in tasks:
        a, b = row.get(task, {}), base.get(task, {})
        ids = sorted(set(a) & set(b))
        if not ids:
            continue
        n = len(ids)
        mean, se = paired_mean_se([a[i][0] - b[i][0] for i in ids])
        changed = sum(a[i][1] != b[i][1] for i in ids)
        per_task[task] = {"n": n, "delta": 100 * mean, "se": 100 * se, "changed": changed / n, "changed_items": changed}
        n_all, changed_all = n_all + n, changed_all + changed
    T = len(per_task)
    if not T:
        return {"tasks": {}, "avg": None}
    se = math.sqrt(sum(v["se"] ** 2 for v in per_task.values())) / T
    return {"tasks": per_task,
            "avg": {"delta": sum(v["delta"] for v in per_task.values()) / T, "se": se, "detectable": 2 * se,
                    "changed": changed_all / n_all, "changed_items": changed_all, "items": n_all, "tasks": T}}


def window_shares(counters: dict) -> dict | None:
    """Algorithm 3's window counters (``window_rows``, ``disagree_rows``, ``steered_rows``: row-iterations inside
    the window, those whose ``K`` candidates reveal different tokens, those whose chosen reveal differs from the
    greedy candidate's) as shares of the window's row-iterations; None for a decoder without a window."""
    n = counters.get("window_rows")
    if not n:
        return None
    return {"window_rows": int(n), "disagree": counters["disagree_rows"] / n, "steered": counters["steered_rows"] / n,
            "disagree_rows": int(counters["disagree_rows"]), "steered_rows": int(counters["steered_rows"])}
