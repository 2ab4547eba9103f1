"""Metric conventions (``docs/baselines.md``, the shared protocols; ``docs/decisions.md``, Table 2).

* Perplexity: ``exp(sum NLL / sum tokens)`` pooled over all sequences (corpus level, not a mean of
  per-sequence perplexities), for both the likelihood bound of Table 1 and generative perplexity.
* Entropy: per-sample unigram entropy of token ids in **bits**, averaged over samples (the paper's
  column follows EDLM, which uses log2).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported by the functions that compute with it: a table job reads these conventions
    import torch  # (paired_effect, window_shares) without loading torch


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
    return {"nll_per_token": per_tok, "nll_se": se, "ppl": math.exp(per_tok), "tokens": int(total_tok), "sequences": n}


def unigram_entropy_bits(x: torch.Tensor) -> torch.Tensor:
    """Per-sample unigram entropy of token ids in bits. ``(N, L) -> (N,)``."""
    import torch

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


def ratio_mean_se(y, x) -> tuple[float, float]:
    """The pooled share ``R = Σ y_i / Σ x_i`` over items ``i`` (e.g. an item's window iterations whose candidates
    disagree, ``y_i``, of its window iterations, ``x_i``) and the ratio estimator's standard error over items,
    ``sqrt(Σ (y_i - R x_i)² / (n (n - 1))) / mean(x)`` (the items independent, the iterations of one item not);
    ``(nan, nan)`` without a counted iteration, the s.e. NaN for fewer than 2 items."""
    y, x = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    if not len(x) or x.sum() == 0:
        return float("nan"), float("nan")
    r = float(y.sum() / x.sum())
    if len(x) < 2:
        return r, float("nan")
    return r, float(np.sqrt(((y - r * x) ** 2).sum() / (len(x) * (len(x) - 1))) / x.mean())


def paired_effect(row: dict, base: dict, tasks: list[str], average: list[str] | None = None) -> dict:
    """A decoder row against its backbone on the same items: per task and over the tasks' average.

    ``row``, ``base``: ``task -> {item id: (score, completion text)}`` (lm-eval's per-sample records; ``score`` in
    [0, 1]).  Per task, over the ``n`` items both have: ``delta`` = mean of ``d_i = score_row_i - score_base_i``
    (x 100, points), ``se`` = ``sd(d) / sqrt(n)`` (sample sd, x 100: the paired s.e., far below either accuracy's
    own s.e. when the rows agree on most items), ``changed`` = share of items whose completion text differs.
    ``avg``: the change of the tasks' *average* accuracy (each task weighted 1/T, as Table 3's Avg. column):
    ``delta = Σ_t delta_t / T``, ``se = sqrt(Σ_t se_t²) / T`` (the tasks are disjoint item sets, so their
    paired differences are independent); ``changed`` pools every item.  ``detectable`` = ``2 se`` of the average:
    the smallest change of the average that this sample resolves at 2 s.e. (0 if no item changed).  ``average``: the
    tasks the average is over (default: all of ``tasks``; the others keep their per-task entry)."""
    per_task = {}
    for task in tasks:
        a, b = row.get(task, {}), base.get(task, {})
        ids = sorted(set(a) & set(b))
        if not ids:
            continue
        n = len(ids)
        mean, se = paired_mean_se([a[i][0] - b[i][0] for i in ids])
        changed = sum(a[i][1] != b[i][1] for i in ids)
        per_task[task] = {"n": n, "delta": 100 * mean, "se": 100 * se, "changed": changed / n, "changed_items": changed}
    used = {t: v for t, v in per_task.items() if average is None or t in average}
    T = len(used)
    if not T:
        return {"tasks": per_task, "avg": None}
    n_avg = sum(v["n"] for v in used.values())
    changed_avg = sum(v["changed_items"] for v in used.values())
    se = math.sqrt(sum(v["se"] ** 2 for v in used.values())) / T
    return {
        "tasks": per_task,
        "avg": {
            "delta": sum(v["delta"] for v in used.values()) / T,
            "se": se,
            "detectable": 2 * se,
            "changed": changed_avg / n_avg,
            "changed_items": changed_avg,
            "items": n_avg,
            "tasks": T,
        },
    }


def window_shares(counters: dict) -> dict | None:
    """Algorithm 3's window counters (:data:`unie.dllm.energy_decoding.WINDOW_COUNTERS`) as shares; None for a decoder without
    a window.  ``disagree``, ``steered``: of the window's row-iterations, those whose ``K`` candidates reveal
    different tokens, and those whose chosen reveal differs from candidate 0's.  ``padding``: of the tokens committed
    inside the window, the share after their answer's first ``<eos>`` (``window_padding / window_reveals``);
    ``answer``: of an average answer's tokens (up to and including its first ``<eos>``), the share committed inside
    the window (``window_answer / answer_tokens``, i.e. the window's average count over the average length).  The
    last two are None for counters written before they existed."""
    n = counters.get("window_rows")
    if not n:
        return None
    out = {
        "window_rows": int(n),
        "disagree": counters["disagree_rows"] / n,
        "steered": counters["steered_rows"] / n,
        "disagree_rows": int(counters["disagree_rows"]),
        "steered_rows": int(counters["steered_rows"]),
    }
    reveals, answers = counters.get("window_reveals"), counters.get("answer_tokens")
    out["padding"] = counters["window_padding"] / reveals if reveals else None
    out["answer"] = counters["window_answer"] / answers if answers else None
    for k in ("window_reveals", "window_padding", "answer_tokens", "window_answer"):
        if k in counters:
            out[k] = int(counters[k])
    return out


# lm-eval metrics whose per-item value is 0 or 1 (a mean of indicators): their standard error is the binomial one
BINARY_METRICS = ("acc", "acc_norm", "exact_match")


def lmeval_numbers_problem(results: dict, tol: float = 1e-9) -> str | None:
    """What disagrees in an lm-eval results file (``results``, ``n-samples``, ``group_subtasks``), or None.

    lm-eval reports a mean metric's standard error as the sample standard deviation over the ``n`` items divided by
    ``sqrt(n)``.  For a metric in [0, 1] that is at most ``sqrt(p (1 - p) / (n - 1))`` (``p`` the mean), with
    equality when every item scores 0 or 1 (:data:`BINARY_METRICS`), whose mean is then ``k / n``.  Groups (their
    standard error is pooled over subtasks) and tasks without ``n`` are not checked."""
    groups = {g for g, subs in (results.get("group_subtasks") or {}).items() if subs}
    n_samples = results.get("n-samples") or {}
    for task, metrics in sorted((results.get("results") or {}).items()):
        n = (n_samples.get(task) or {}).get("effective")
        if task in groups or not isinstance(n, int) or n < 2 or not isinstance(metrics, dict):
            continue
        for key, p in sorted(metrics.items()):
            if "," not in key or "_stderr," in key or not isinstance(p, (int, float)) or isinstance(p, bool):
                continue
            name, filt = key.split(",", 1)
            se = metrics.get(f"{name}_stderr,{filt}")
            if not isinstance(se, (int, float)) or not 0 <= p <= 1:
                continue
            bound = math.sqrt(p * (1 - p) / (n - 1))
            if name in BINARY_METRICS:
                if abs(p * n - round(p * n)) > 1e-6:
                    return f"{task} {key} = {p!r} is not a count of {n} items"
                if abs(se - bound) > tol:
                    return f"{task} {key} = {p!r} over {n} items has s.e. {se!r}, not {bound!r}"
            elif se > bound + tol:
                return f"{task} {key} = {p!r} over {n} items has s.e. {se!r}, above its bound {bound!r}"
    return None
