"""How much room a selection rule had, and how well a score judges candidates (beyond the paper).

From the candidate trees of :mod:`unie.dllm.candidate_tree` and each leaf's score under the task's own metric:

* **ceiling** and **floor** of an item: its best and worst leaf (the best and worst any selection among the window's
  candidates can reach: any energy, any proxy, an oracle); over a task, their paired change against the backbone's
  own decode of the same item, with the paired s.e. (:func:`unie.eval.metrics.paired_effect`, the Table 3 rows'
  convention: per task, then the tasks' average);
* **decides**: the share of items whose leaves are not all scored alike (a choice inside the window changes the
  item's score);
* a rule's **share of the ceiling**: its paired change over the ceiling's (both against the backbone), with a
  bootstrap s.e. over items;
* a score's **judgement** (:func:`pairwise_auc`): over every window node and every pair of its candidates that lead to
  different outcomes (a candidate's outcome: the mean score of the leaves below it), the share of pairs the score
  orders right (the better candidate at lower energy; a tie counts half), with a bootstrap s.e. over items: 0.5 is
  no judgement, 1 a perfect one;
* the **break-even** judgement (:func:`break_even`): where a rule's paired change crosses zero along a continuum of
  proxies (its AUC interpolated linearly between the two points around the crossing), with a bootstrap s.e.
"""

from __future__ import annotations

import math
import random

import numpy as np

from .metrics import paired_effect


def leaf_scores(task, doc: dict, texts: list[str], until: list[str], metric: str) -> list[float]:
    """Each completion's score under lm-eval's task object ``task`` as lm-eval scores a response: cut at the first
    stop string, through the task's filter ensemble named by ``metric`` (``"<metric>,<filter>"``, e.g.
    ``exact_match,none``), then its ``process_results``."""
    from ..dllm.lmeval import truncate_at

    name, filt = metric.split(",", 1)
    resps = [[truncate_at(t, until)] for t in texts]
    ensemble = next((e for e in getattr(task, "_filters", None) or [] if e.name == filt), None)
    if ensemble is None:
        raise KeyError(f"task {getattr(task, 'config', {}).get('task', task)!r} has no filter {filt!r}")
    for f in ensemble.filters:
        resps = f().apply(resps, [doc] * len(resps))
    return [float(task.process_results(doc, [r])[name]) for r in resps]


def room_effects(leaves: dict, base: dict, tasks: list[str], average: list[str] | None = None) -> dict:
    """``leaves``: ``task -> {item: [leaf scores]}``, ``base``: ``task -> {item: (score, text)}`` (the backbone's
    row).  The ceiling's and the floor's paired change against the backbone (:func:`paired_effect`: per task and the
    average over the tasks of ``average``, default all, points ± paired s.e.) and, per task and pooled over those, the
    share of items the window decides."""
    best = {t: {i: (max(s), "ceiling") for i, s in v.items()} for t, v in leaves.items()}
    worst = {t: {i: (min(s), "floor") for i, s in v.items()} for t, v in leaves.items()}
    decides = {t: sum(max(s) != min(s) for s in v.values()) / len(v) for t, v in leaves.items() if v}
    pooled = [s for t, v in leaves.items() if average is None or t in average for s in v.values()]
    return {
        "ceiling": paired_effect(best, base, tasks, average),
        "floor": paired_effect(worst, base, tasks, average),
        "decides": {"tasks": decides, "avg": sum(max(s) != min(s) for s in pooled) / len(pooled) if pooled else None},
    }


def _bootstrap(items: list, stat, reps: int = 400, seed: int = 0) -> float:
    """The standard deviation of ``stat`` over ``reps`` resamples of ``items`` with replacement (NaN dropped)."""
    rng = random.Random(seed)
    return _sd([stat([items[rng.randrange(len(items))] for _ in items]) for _ in range(reps)])


def _sd(vals: list) -> float:
    """The sample standard deviation of ``vals``, None and NaN dropped (NaN with fewer than two left)."""
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if len(vals) < 2:
        return float("nan")
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def _resample_counts(n: int, reps: int, seed: int = 0) -> np.ndarray:
    """``(reps, n)``: how often each of ``n`` items is drawn in each of :func:`_bootstrap`'s resamples, the very draws
    of ``random.Random(seed).randrange(n)``, ``n`` per resample: CPython's rejection sampling on
    ``getrandbits(n.bit_length())`` (the top bits of one 32-bit Mersenne Twister output, redrawn while ``>= n``),
    reproduced on the same stream by numpy's MT19937 in the same state."""
    if not 0 < n < 2**32:
        raise ValueError(f"need 0 < n < 2**32 items, got {n}")
    state = random.Random(seed).getstate()[1]
    mt = np.random.MT19937()
    mt.state = {"bit_generator": "MT19937", "state": {"key": np.array(state[:624], dtype=np.uint32), "pos": state[624]}}
    shift, need, kept = 32 - n.bit_length(), n * reps, []
    while need > 0:
        r = mt.random_raw(need + need // 4 + 64) >> np.uint64(shift)
        r = r[r < n][:need]
        kept.append(r)
        need -= len(r)
    draws = np.concatenate(kept).astype(np.int64).reshape(reps, n)
    return np.bincount((draws + n * np.arange(reps)[:, None]).ravel(), minlength=reps * n).reshape(reps, n)


def _exactly_summable(*columns: np.ndarray) -> bool:
    """Whether every value is a multiple of 2^-10 well inside float64's integers (item scores 0/1, their
    differences, counts and half counts): then any order of summing them gives the same float."""
    return all(
        np.all(np.isfinite(c)) and np.all(c * 1024 == np.round(c * 1024)) and np.abs(c).sum() < 2**40 for c in columns
    )


def _bootstrap_of_sums(items: list, stat, columns: dict, stat_of_sums, reps: int = 400, seed: int = 0) -> float:
    """:func:`_bootstrap` of ``stat`` for a statistic of per-item sums, from every resample's sums at once (the same
    draws): ``columns`` name -> ``(n,)`` per-item values, ``stat_of_sums(sums)`` the statistic from their sums over one
    resample's items (``counts @ values``).  Exact, so the loop's result bit for bit, where the values are
    :func:`_exactly_summable`; the loop itself where they are not."""
    if not _exactly_summable(*columns.values()):
        return _bootstrap(items, stat, reps, seed)
    counts = _resample_counts(len(items), reps, seed).astype(np.float64)
    sums = {k: (counts @ np.asarray(v, dtype=np.float64)).tolist() for k, v in columns.items()}
    return _sd([stat_of_sums({k: sums[k][r] for k in sums}) for r in range(reps)])


def share_of_ceiling(row: list[float], ceiling: list[float], base: list[float]) -> dict:
    """A rule's gain as a share of the ceiling's, both paired against the backbone on the same items (lists aligned
    item by item): ``share`` = Σ(row − base) / Σ(ceiling − base) (None when the ceiling gains nothing) and its
    bootstrap s.e."""
    items = list(zip(row, ceiling, base))

    def stat(sample):
        room = sum(c - b for _, c, b in sample)
        return sum(r - b for r, _, b in sample) / room if room > 0 else None

    share = stat(items)
    if share is None:
        return {"share": None, "se": None}
    columns = {"gain": np.array([r - b for r, _, b in items]), "room": np.array([c - b for _, c, b in items])}
    se = _bootstrap_of_sums(items, stat, columns, lambda t: t["gain"] / t["room"] if t["room"] > 0 else None)
    return {"share": share, "se": se}


def _item_pairs(tree, scores: list[float], score_of, judged=lambda node: True) -> list[tuple[float, float]]:
    """Every pair of sibling candidates of ``tree`` with different outcomes: ``(score of the better, score of the
    worse)`` per pair, ``score_of(node, j)`` the judged score (higher = preferred); only at the nodes ``judged(node)``
    (those that hold the score: a cut tree records a scorer's energies along its own path only)."""
    from ..dllm.candidate_tree import subtree_leaves

    out = []
    for node in tree.nodes:
        if not node.children or not judged(node):
            continue
        outcome = {}
        for j, child in enumerate(node.children):
            if child is None:
                continue
            below = subtree_leaves(tree, child)
            if below:
                outcome[j] = sum(scores[k] for k in below) / len(below)
        js = sorted(outcome)
        for a in js:
            for b in js:
                if outcome[a] > outcome[b] and node.children[a] != node.children[b]:
                    out.append((score_of(node, a), score_of(node, b)))
    return out


def _auc_of(sample) -> float | None:
    right = total = 0.0
    for pairs in sample:
        r, t = _pair_counts(pairs)
        right, total = right + r, total + t
    return right / total if total else None


def _pair_counts(pairs) -> tuple[float, float]:
    """An item's pairs ordered right (a tie counting half) and its pairs: its terms of :func:`_auc_of`'s two sums
    (half-integers: summed exactly in any order)."""
    right = 0.0
    for good, bad in pairs:
        right += 1.0 if good > bad else 0.5 if good == bad else 0.0
    return right, float(len(pairs))


def _auc_se(per_item: list) -> float:
    """The bootstrap s.e. of :func:`_auc_of` over items (:func:`_bootstrap`'s resamples, summed at once)."""
    right, total = (np.array(c) for c in zip(*(_pair_counts(p) for p in per_item)))
    columns = {"right": right, "total": total}
    return _bootstrap_of_sums(per_item, _auc_of, columns, lambda t: t["right"] / t["total"] if t["total"] else None)


def pairwise_auc(trees: list, scores: list[list[float]], score_of, judged=lambda node: True) -> dict:
    """The judgement of a score over items (module doc): ``trees[i]`` and ``scores[i]`` (item ``i``'s leaf scores),
    ``score_of(node, j)`` the score of candidate ``j`` at ``node`` (higher = preferred: minus an energy, or the
    backbone's ``log p_theta``).  ``{"auc", "se", "pairs", "items"}``; ``auc`` None without a pair."""
    per_item = [_item_pairs(t, s, score_of, judged) for t, s in zip(trees, scores)]
    per_item = [p for p in per_item if p]
    auc = _auc_of(per_item)
    return {
        "auc": auc,
        "se": _auc_se(per_item) if auc is not None else None,
        "pairs": sum(len(p) for p in per_item),
        "items": len(per_item),
    }


def break_even(points: list[tuple[float, float]]) -> float | None:
    """The AUC at which a rule's change crosses zero: ``points`` = ``(auc, change)`` along a continuum (sorted by
    AUC here); linear interpolation between the first two neighbours whose changes have opposite signs (or one is
    0); None when the change never crosses zero."""
    pts = sorted((a, c) for a, c in points if a is not None and c is not None)
    for (a0, c0), (a1, c1) in zip(pts, pts[1:]):
        if c0 == 0:
            return a0
        if c0 * c1 < 0 or c1 == 0:
            return a0 + (a1 - a0) * (-c0) / (c1 - c0) if c1 != c0 else a0
    return None


def break_even_bootstrap(per_item: list[dict], chain: list[str], reps: int = 200) -> dict:
    """A rule's break-even judgement along a continuum of scorers ``chain`` (learned proxy ... oracle), with its
    bootstrap s.e. over items.  ``per_item``: per item, scorer -> ``(d, pairs)``: the rule's score minus the
    backbone's on that item, and the item's candidate pairs (:func:`_item_pairs` of that scorer).  Returns
    ``{"auc": the break-even AUC or None, "se", "points": [(scorer, auc, change in points)]}``."""

    def points(sample):
        out = []
        for name in chain:
            d = [item[name][0] for item in sample if not math.isnan(item[name][0])]
            out.append((name, _auc_of([item[name][1] for item in sample]), 100 * sum(d) / len(d) if d else None))
        return out

    def stat(sample):
        return break_even([(a, c) for _, a, c in points(sample)])

    pts = points(per_item)
    be = break_even([(a, c) for _, a, c in pts])
    if be is None:
        return {"auc": None, "se": None, "points": pts}
    columns = {}
    for name in chain:  # each scorer's terms of its AUC's and its mean change's sums, per item
        right, total = zip(*(_pair_counts(item[name][1]) for item in per_item))
        d = np.array([item[name][0] for item in per_item], dtype=np.float64)
        valid = ~np.isnan(d)
        columns[f"{name}/right"], columns[f"{name}/total"] = np.array(right), np.array(total)
        columns[f"{name}/d"], columns[f"{name}/n"] = np.where(valid, d, 0.0), valid.astype(np.float64)

    def stat_of_sums(t):  # points(sample)'s AUCs and changes from the resample's sums
        return break_even(
            [
                (
                    t[f"{name}/right"] / t[f"{name}/total"] if t[f"{name}/total"] else None,
                    100 * t[f"{name}/d"] / t[f"{name}/n"] if t[f"{name}/n"] else None,
                )
                for name in chain
            ]
        )

    return {"auc": be, "se": _bootstrap_of_sums(per_item, stat, columns, stat_of_sums, reps), "points": pts}


def room_reading(delta, delta_se, ceiling, ceiling_se) -> str:
    """What a rule's change says given its room: ``gain`` / ``loss`` beyond 2 paired s.e.; else ``no room`` when the
    ceiling itself is within 2 s.e. of the backbone, ``room not taken`` when it is not; ``level`` without a room."""

    def missing(v):
        return v is None or (isinstance(v, float) and math.isnan(v))

    if missing(delta):
        return "--"
    if delta_se and abs(delta) >= 2 * delta_se:
        return "gain" if delta > 0 else "loss"
    if missing(ceiling):
        return "level"
    return "no room" if not ceiling_se or ceiling < 2 * ceiling_se else "room not taken"


__all__ = [
    "break_even",
    "break_even_bootstrap",
    "room_reading",
    "leaf_scores",
    "pairwise_auc",
    "room_effects",
    "share_of_ceiling",
]
