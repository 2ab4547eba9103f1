"""Several trainings in, one aggregate out: every table's cells as the mean and spread over the seeds' runs, and
which claims hold in each training.

Pure functions over the DataFrames the table and figure rules wrote (one per seed, the same CSV of each run); rule
``replicates`` (:mod:`unie.pipeline.replicate_runs`) reads and writes the files.

* :func:`aggregate`: a table's long form, one line per cell (its key columns, the ``quantity``, one column per seed,
  ``mean``, ``sd`` (the across-training standard deviation, ddof 1), ``min``, ``max``, ``n_runs``).
* :func:`claims`: for every cell with a change and its paired s.e. (Table 3's rows, the selection rules, the map's
  points: ``delta``, ``delta_se``) and for every Table 2 row against MDLM and against EDLM-AR at the same steps and
  evaluator, every Figure 2 curve against no energy, every Figure 3 point against k = 1 (the difference of the
  per-token NLLs over √(se² + se²): independent samples), the z = change / s.e. in each training
  and a verdict: ``holds in all N`` (beyond 2 s.e., one sign, in every training), ``holds in k of N`` (beyond 2 s.e.
  in k, with the signs), ``signs differ, beyond 2 s.e. in all N``, ``level in all N``.
* :func:`page`: the Markdown page: each table's main quantities as ``mean ± sd [min, max]`` beside each cell, the
  claims, and the proxy/backbone ratio of Table 3 as mean and range.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .figures import NO_ENERGY, k_label
from .markdown import md_table, plain

# the columns that name a cell of each table (the rest of its numeric columns are its quantities)
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "table1_ppl": ("row", "source", "domain"),
    "table2_genppl": ("row", "run", "steps", "evaluator"),
    "table3_dllm": ("row", "task"),
    "table_app_dllm_full": ("row", "task"),
    "table_app_selection": ("row",),
    "table_app_k": ("curve", "row"),
    "table_app_w": ("curve", "row"),
    "table_app_map": ("backbone", "draw", "w", "rule", "label", "proxy"),
    "fig2_ablation": ("context", "curve", "run", "steps", "selection"),
    "fig3_tradeoff": ("panel", "curve", "run", "steps"),
    "fig4_dllm_tradeoff": ("curve", "label", "value"),
    "fig_app_map": ("backbone", "draw", "w", "rule", "label", "proxy"),
    "partition_check": ("ar_context", "revealed", "D"),
    "paper_vs_ours": ("table", "row", "column"),
}

# what the page shows of each table: (index columns, column that spreads into columns or None, quantities, scale)
PAGE_VIEWS: dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...], float]] = {
    "table1_ppl": (("row",), "domain", ("ppl",), 1.0),
    "table2_genppl": (("row", "steps"), "evaluator", ("genppl",), 1.0),
    "table3_dllm": (("row",), "task", ("value",), 1.0),  # accuracy in % already, a column per task
    "table_app_dllm_full": (("row",), "task", ("value",), 1.0),
    "table_app_selection": (("row",), None, ("avg", "delta"), 1.0),
    "table_app_k": (("curve", "row"), None, ("value", "tokens_per_s"), 1.0),
    "table_app_w": (("curve", "row"), None, ("value", "tokens_per_s"), 1.0),
    "fig2_ablation": (("context", "curve", "selection"), "steps", ("genppl",), 1.0),
    "fig4_dllm_tradeoff": (("curve", "value"), None, ("accuracy", "tokens_per_s"), 1.0),
    "table_app_map": (("backbone", "draw", "w", "rule"), "proxy", ("delta",), 1.0),
}

# a table's change and its s.e. when they are not named delta / delta_se (the map's cells, its break-even AUCs aside)
CHANGE_COLUMNS = {"table_app_map": ("delta", "se")}
FIG2_NO_ENERGY = NO_ENERGY  # Figure 2's curve without an energy
FIG3_NO_ENERGY = k_label(1)  # Figure 3's k = 1 point: the plain sampler, one candidate
CLAIM_Z = 2.0  # a change beyond 2 s.e. is a difference; below it, level (docs/findings.md)
_BLANK = ""


def keys_of(name: str, df: pd.DataFrame) -> list[str]:
    """The key columns of table ``name`` present in ``df``; a table not in :data:`TABLE_KEYS` is keyed by its
    text columns (``object`` or pandas' ``str`` dtype, which ``read_csv`` gives text under pandas 3)."""
    declared = TABLE_KEYS.get(name)
    if declared is not None:
        return [c for c in declared if c in df.columns]
    return [c for c in df.columns if df[c].dtype == object or pd.api.types.is_string_dtype(df[c])]


def quantities_of(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """The numeric, non-boolean columns that are not keys: what a cell reports."""
    return [
        c
        for c in df.columns
        if c not in keys and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
    ]


def _keyed(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    out = df.copy()
    for k in keys:  # a missing key (NaN) is a value of its own, not a dropped row
        out[k] = out[k].map(lambda v: _BLANK if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return out


def aggregate(name: str, frames: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """The long aggregate of table ``name`` over ``frames`` (seed -> the table as one run wrote it): one line per
    (key columns, quantity), with each seed's value (``seed_S``), ``mean``, ``sd`` (ddof 1), ``min``, ``max`` and
    ``n_runs`` (the runs that have the cell).  Lines come in the first run's order."""
    seeds = list(frames)
    first = frames[seeds[0]]
    keys = keys_of(name, first)
    quantities = [q for q in quantities_of(first, keys) if all(q in f.columns for f in frames.values())]
    long = []
    for seed, df in frames.items():
        d = _keyed(df, keys)
        d["_order"] = np.arange(len(d))
        # the melted value under a name no table uses (Table 3's long CSV has a column "value" of its own)
        m = d.melt(id_vars=[*keys, "_order"], value_vars=quantities, var_name="quantity", value_name="_cell")
        m["seed"] = seed
        long.append(m)
    both = pd.concat(long, ignore_index=True)
    dup = both.duplicated([*keys, "quantity", "seed"])
    if dup.any():
        row = both[dup].iloc[0]
        raise ValueError(
            f"{name}: two cells with the same key {tuple(row[k] for k in keys)} in seed {row.seed}'s "
            f"table: its key columns ({', '.join(keys)}) do not name a cell"
        )
    wide = both.set_index([*keys, "quantity", "seed"])["_cell"].unstack("seed").reindex(columns=seeds)
    wide.columns = [f"seed_{s}" for s in seeds]
    order = both[both.seed == seeds[0]].set_index([*keys, "quantity"])["_order"]
    wide["_order"] = order.reindex(wide.index).fillna(len(first)).values
    q_rank = {q: i for i, q in enumerate(quantities)}
    wide["_q"] = [q_rank[idx[-1]] for idx in wide.index]
    wide = wide.sort_values(["_order", "_q"]).drop(columns=["_order", "_q"])
    vals = wide[[f"seed_{s}" for s in seeds]].astype(float)
    wide["mean"] = vals.mean(axis=1)
    wide["sd"] = vals.std(axis=1, ddof=1)
    wide["min"] = vals.min(axis=1)
    wide["max"] = vals.max(axis=1)
    wide["n_runs"] = vals.notna().sum(axis=1)
    return wide.reset_index()


def verdict(z: list[float]) -> str:
    """The verdict over trainings from each training's z = change / s.e. (NaN: no value in that training)."""
    zs = [v for v in z if not (v is None or math.isnan(v))]
    n = len(zs)
    if not n:
        return "no value"
    beyond = [v for v in zs if abs(v) >= CLAIM_Z]
    if len(beyond) == n and (all(v > 0 for v in beyond) or all(v < 0 for v in beyond)):
        return f"holds in all {n} ({'+' if beyond[0] > 0 else '−'})"
    if not beyond:
        return f"level in all {n}"
    signs = "".join("+" if v > 0 else "−" for v in beyond)
    if len(beyond) == n:  # beyond 2 s.e. in every training, but not with one sign: no claim either way
        return f"signs differ, beyond 2 s.e. in all {n} ({signs})"
    return f"holds in {len(beyond)} of {n} ({signs})"


def _claim_rows(
    table: str, keys: list[str], frames: dict[int, pd.DataFrame], change: str, se: str, what: str
) -> list[dict]:
    out = []
    seeds = list(frames)
    keyed = {s: _keyed(f, keys).set_index(keys) for s, f in frames.items()}
    for idx in keyed[seeds[0]].index:
        per = {}
        for s in seeds:
            f = keyed[s]
            if idx in f.index:
                row = f.loc[idx]
                row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
                per[s] = (float(row[change]), float(row[se]))
        if not per or all(math.isnan(d) for d, _ in per.values()):
            continue
        z = [d / e if e and not math.isnan(e) and e > 0 else float("nan") for d, e in per.values()]
        label = idx if isinstance(idx, tuple) else (idx,)
        out.append(
            {
                "table": table,
                "cell": " / ".join(str(v) for v in label if v != _BLANK),
                "change": what,
                **{f"seed_{s}": per[s][0] if s in per else float("nan") for s in seeds},
                **{f"se_{s}": per[s][1] if s in per else float("nan") for s in seeds},
                **{f"z_{s}": zz for s, zz in zip(per, z)},
                "verdict": verdict(z),
            }
        )
    return out


def task_average_change(df: pd.DataFrame) -> pd.DataFrame:
    """Per Table 3 row with a backbone, the paired change of its task average and its s.e. (the tasks' paired s.e.
    combined as √(Σ se²) / T, as Table 3 does): columns ``row``, ``delta``, ``delta_se``."""
    d = df.dropna(subset=["delta"])
    if "in_average" in df:  # the tasks Table 3 averages (dllm.tasks.average), for every row (its room rows too)
        averaged = set(df.loc[df.in_average == True, "task"]) if "task" in df else set()  # noqa: E712 (NaN: not said)
        d = d[d.task.isin(averaged)] if averaged else d[d.in_average.fillna(True).astype(bool)]
    if d.empty:
        return pd.DataFrame(columns=["row", "delta", "delta_se"])
    g = d.groupby("row", sort=False)
    return pd.DataFrame(
        {
            "delta": g.delta.mean(),
            "delta_se": g.delta_se.apply(lambda e: math.sqrt((e.astype(float) ** 2).sum()) / len(e)),
        }
    ).reset_index()


def _independent_claims(
    table: str, frames: dict[int, pd.DataFrame], keys: list[str], match: list[str], is_reference, value: str, what: str
) -> list[dict]:
    """Claims for the difference of ``value`` (a per-token NLL, with its s.e. in ``nll_se``) between each line of a
    table and the reference line (``is_reference``: a mask) that agrees with it on ``match``, over √(se² + se²):
    two independent sets of samples.  Lines without a reference, and the reference itself, are left out."""
    diffs = {}
    for seed, df in frames.items():
        if not {value, "nll_se", *keys} <= set(df.columns):
            continue
        ref = df[is_reference(df)].drop_duplicates(match).set_index(match)
        if ref.empty:
            continue
        rows = df[~is_reference(df)].copy()
        b = ref.reindex(pd.MultiIndex.from_frame(rows[match]) if len(match) > 1 else rows[match[0]])
        rows["d_nll"] = rows[value].values - b[value].values
        rows["d_se"] = np.sqrt(rows.nll_se.values.astype(float) ** 2 + b.nll_se.values.astype(float) ** 2)
        diffs[seed] = rows[[*keys, "d_nll", "d_se"]].dropna(subset=["d_nll", "d_se"])
    return _claim_rows(table, keys, diffs, "d_nll", "d_se", what) if diffs else []


def claims(
    tables: dict[str, dict[int, pd.DataFrame]],
    baseline_run: str = "mdlm",
    extra_baselines: tuple[str, ...] = ("edlm_ar",),
) -> pd.DataFrame:
    """Every change the tables report with its s.e., per training, and the verdict over trainings (module doc):
    the rows with ``delta`` and ``delta_se`` (Table 3's energy and baseline rows averaged over tasks come from the
    selection table; the map's points); each Table 2 row against ``baseline_run`` and each of ``extra_baselines``
    (EDLM-AR, the energy baseline Uni-E is compared with) at the same steps and evaluator; each Figure 2 curve
    against no energy in its panel at the same steps; each Figure 3 point against k = 1 at the same steps."""
    out: list[dict] = []
    done: set[str] = set()  # rows already claimed from Table 3 (the selection table repeats its energy rows)
    full = tables.get("table_app_dllm_full") or tables.get("table3_dllm")
    if full:
        averages = {s: task_average_change(df) for s, df in full.items()}
        if any(not a.empty for a in averages.values()):
            name = "table_app_dllm_full" if "table_app_dllm_full" in tables else "table3_dllm"
            out += _claim_rows(
                name, ["row"], averages, "delta", "delta_se", "paired change of the task average against the backbone"
            )
            done = set().union(*(set(a.row) for a in averages.values()))
    for name, frames in tables.items():
        first = next(iter(frames.values()))
        change, se = CHANGE_COLUMNS.get(name, ("delta", "delta_se"))
        if {change, se} <= set(first.columns) and name not in ("table3_dllm", "table_app_dllm_full", "fig_app_map"):
            keys = keys_of(name, first)
            if keys == ["row"]:
                frames = {s: f[~f.row.isin(done)] for s, f in frames.items()}
            frames = {s: f.dropna(subset=[change]) for s, f in frames.items()}
            out += _claim_rows(name, keys, frames, change, se, "paired change against the backbone")
    if "table2_genppl" in tables:
        for ref in (baseline_run, *extra_baselines):
            out += _independent_claims(
                "table2_genppl",
                tables["table2_genppl"],
                ["row", "steps", "evaluator"],
                ["steps", "evaluator"],
                lambda df, ref=ref: df.run == ref,
                "nll_per_token",
                f"NLL per token minus {ref}'s (independent samples)",
            )
    if "fig2_ablation" in tables:  # each energy curve against no energy, same panel (context), rule and steps
        out += _independent_claims(
            "fig2_ablation",
            tables["fig2_ablation"],
            ["context", "curve", "selection", "steps"],
            ["context", "steps"],
            lambda df: df.curve == FIG2_NO_ENERGY,
            "nll",
            f"NLL per token minus {FIG2_NO_ENERGY!r}'s in its panel (independent samples)",
        )
    if "fig3_tradeoff" in tables:  # every generated point against k = 1 (the plain sampler) at the same steps
        out += _independent_claims(
            "fig3_tradeoff",
            tables["fig3_tradeoff"],
            ["panel", "curve", "steps"],
            ["steps"],
            lambda df: (df.curve == FIG3_NO_ENERGY) & (df.panel == "k"),
            "nll",
            f"NLL per token minus {FIG3_NO_ENERGY}'s (independent samples)",
        )
    return pd.DataFrame(out)


def break_even_claims(frames: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Each map rule's break-even judgement over trainings (the map's ``break_even`` lines: per backbone, candidate
    draw and window, the pairwise AUC at which the rule's paired change crosses zero along the continuum from the
    learned proxy to the oracle (its ends: ``chain_from``, ``chain_to``), ± its bootstrap s.e.).  Per rule: each
    training's AUC and s.e. (NaN where the change never crosses zero), the rule's change ± s.e. and its judgement
    (AUC) with the learned proxy and with the oracle in each training (the ends of the continuum: why it never
    crosses, and where), the backbone's own judgement of the same candidates (``dlm_auc_S``: its log p_theta's
    pairwise AUC), and a verdict: ``breaks even in all N (AUC lo–hi)``, ``breaks even in k of N``, or, never crossing
    in any training, ``gains at both ends in all N`` / ``loses at both ends in all N`` / ``never crosses (mixed
    ends)`` (an end counts as a gain or a loss beyond 2 s.e.; otherwise ``level``)."""
    keys = ["backbone", "draw", "w", "label"]
    seeds = list(frames)
    out = []
    lines = {s: f[f.rule == "break_even"].set_index(keys) for s, f in frames.items()}
    cells = {s: f[f.rule != "break_even"] for s, f in frames.items()}

    def end(s, idx, proxy):
        b, draw, w, rule = idx
        c = cells[s]
        hit = c[(c.backbone == b) & (c.draw == draw) & (c.w == w) & (c.rule == rule) & (c.proxy == proxy)]
        if hit.empty:
            return float("nan"), float("nan"), float("nan")
        return float(hit.delta.iloc[0]), float(hit.se.iloc[0]), float(hit.auc.iloc[0])

    def reading(d, e):
        if math.isnan(d):
            return "–"
        return "level" if not e or math.isnan(e) or abs(d) < CLAIM_Z * e else ("gain" if d > 0 else "loss")

    for idx in lines[seeds[0]].index:
        row = {"backbone": idx[0], "draw": idx[1], "w": idx[2], "rule": idx[3]}
        crossed, ends = [], []
        for s in seeds:
            ln = lines[s].loc[idx] if idx in lines[s].index else None  # this training's break-even line
            auc, se = (float(ln.auc), float(ln.auc_se)) if ln is not None else (math.nan, math.nan)
            row[f"auc_{s}"], row[f"auc_se_{s}"] = auc, se
            # the backbone's own judgement of the same candidates (its log p_theta's AUC): what a proxy must beat
            row[f"dlm_auc_{s}"] = float(ln.dlm_auc) if ln is not None and "dlm_auc" in ln else math.nan
            lo = end(s, idx, ln.chain_from) if ln is not None else (math.nan,) * 3
            hi = end(s, idx, ln.chain_to) if ln is not None else (math.nan,) * 3
            row[f"learned_{s}"], row[f"learned_se_{s}"], row[f"learned_auc_{s}"] = lo
            row[f"oracle_{s}"], row[f"oracle_se_{s}"], row[f"oracle_auc_{s}"] = hi
            if not math.isnan(auc):
                crossed.append(auc)
            ends.append((reading(*lo[:2]), reading(*hi[:2])))
        n = len(seeds)
        if len(crossed) == n:
            v = f"breaks even in all {n} (AUC {min(crossed):.2f}–{max(crossed):.2f})"
        elif crossed:
            v = f"breaks even in {len(crossed)} of {n}"
        elif all(a == "gain" and b == "gain" for a, b in ends):
            v = f"gains at both ends in all {n}"
        elif all(a == "loss" and b == "loss" for a, b in ends):
            v = f"loses at both ends in all {n}"
        else:
            v = "never crosses (ends: " + ", ".join(f"{a}/{b}" for a, b in ends) + ")"
        row["verdict"] = v
        out.append(row)
    return pd.DataFrame(out)


def judgement_check(frames: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Does a map cell's sign follow its judgement?  Per training and backbone, over the map's cells of the rules
    that read a proxy (each rule x proxy x draw x window with a judgement): ``cells``, ``beyond`` (their change is
    beyond 2 s.e.), ``agree`` (of those, the change has the sign of the rule's judgement minus the backbone's own,
    ``auc - dlm_auc``: a gain where the rule's energy orders the window's candidates better than the backbone's
    log p_theta does, a loss where worse) and ``against`` (the rest, with the largest ``|auc - dlm_auc|`` among them,
    ``worst_gap``)."""
    out = []
    for seed, f in frames.items():
        need = {"auc", "dlm_auc", "delta", "se", "proxy", "rule"}
        if not need <= set(f.columns):
            continue
        c = f[(f.rule != "break_even") & (f.rule != "apd") & (f.proxy != "any")].dropna(subset=["auc", "dlm_auc"])
        for b, cb in c.groupby("backbone", sort=False):
            beyond = cb[cb.delta.abs() >= CLAIM_Z * cb.se]
            agree = (beyond.delta > 0) == (beyond.auc > beyond.dlm_auc)
            against = beyond[~agree]
            out.append(
                {
                    "seed": seed,
                    "backbone": b,
                    "cells": len(cb),
                    "beyond": len(beyond),
                    "agree": int(agree.sum()),
                    "against": len(against),
                    "worst_gap": float((against.auc - against.dlm_auc).abs().max()) if len(against) else math.nan,
                }
            )
    return pd.DataFrame(out)


def break_even_view(be: pd.DataFrame) -> str:
    """:func:`break_even_claims` as a Markdown table: per rule, each training's break-even AUC ± s.e. (``never``: the
    change does not cross zero; then the change and the judgement with the learned proxy and with the oracle), and
    the verdict."""
    seeds = [c[len("auc_se_") :] for c in be.columns if c.startswith("auc_se_")]

    def one(r, s):
        auc = r[f"auc_{s}"]
        dlm = r.get(f"dlm_auc_{s}", math.nan)
        backbone = "" if math.isnan(dlm) else f" (backbone {dlm:.2f})"
        if not math.isnan(auc):
            return f"{auc:.2f} ± {r[f'auc_se_{s}']:.2f}{backbone}"
        lo, hi = r[f"learned_{s}"], r[f"oracle_{s}"]
        if math.isnan(lo) and math.isnan(hi):
            return "–"
        la, oa = r.get(f"learned_auc_{s}", math.nan), r.get(f"oracle_auc_{s}", math.nan)
        return (
            f"never ({with_se(lo, r[f'learned_se_{s}'])} at AUC {la:.2f} … "
            f"{with_se(hi, r[f'oracle_se_{s}'])} at {oa:.2f}){backbone}"
        )

    header = ["backbone", "candidates", "w", "rule", *[f"seed {s}" for s in seeds], "verdict"]
    rows = [
        [
            plain(r["backbone"]),
            plain(r["draw"]),
            f"{r['w']:g}",
            plain(r["rule"]),
            *[one(r, s) for s in seeds],
            r["verdict"],
        ]
        for r in be.to_dict("records")
    ]
    return md_table(header, rows)


def cell(mean: float, sd: float, lo: float, hi: float, digits: int) -> str:
    if mean is None or math.isnan(mean):
        return "–"
    spread = "" if sd is None or math.isnan(sd) else f" ± {sd:.{digits}f}"
    return f"{mean:.{digits}f}{spread} [{lo:.{digits}f}, {hi:.{digits}f}]"


def view(name: str, agg: pd.DataFrame, digits: int = 2) -> str | None:
    """A table's main quantities as a Markdown table of ``mean ± sd [min, max]`` cells (:data:`PAGE_VIEWS`), or
    ``None`` for a table without a view (its CSV has every cell)."""
    if name not in PAGE_VIEWS:
        return None
    index, spread, quantities, scale = PAGE_VIEWS[name]
    index = [c for c in index if c in agg.columns]
    sub = agg[agg.quantity.isin(quantities)]
    if sub.empty:
        return None
    cols = ["quantity"] + ([spread] if spread and spread in sub.columns else [])
    order_rows = list(dict.fromkeys(tuple(r) for r in sub[index].itertuples(index=False)))
    order_cols = list(dict.fromkeys(tuple(r) for r in sub[cols].itertuples(index=False)))
    table = {}
    for r in sub.itertuples(index=False):
        d = r._asdict()
        table[(tuple(d[c] for c in index), tuple(d[c] for c in cols))] = cell(
            d["mean"] * scale, d["sd"] * scale, d["min"] * scale, d["max"] * scale, digits
        )
    header = [*index, *[" ".join(str(v) for v in c if v != _BLANK) for c in order_cols]]
    rows = [[plain(v) for v in r] + [table.get((r, c), "–") for c in order_cols] for r in order_rows]
    return md_table(header, rows)


def ratio_line(frames: dict[int, pd.DataFrame], proxy_row: str, backbones: dict[str, str]) -> str | None:
    """The proxy's average (Table 3's Avg. columns) as a multiple of each backbone's, mean and range over trainings
    (Table 3's caption over the replicates)."""
    parts = []
    for row, label in backbones.items():
        ratios = []
        for df in frames.values():
            d = df[df.in_average.astype(bool)] if "in_average" in df else df
            avg = d.groupby("row").value.mean()
            if proxy_row in avg and row in avg and avg[row] > 0:
                ratios.append(avg[proxy_row] / avg[row])
        if ratios:
            parts.append(f"{label} {np.mean(ratios):.2f}× (range {min(ratios):.2f}–{max(ratios):.2f})")
    if not parts:
        return None
    return (
        f"The proxy's average as a multiple of each backbone's, over {len(frames)} trainings: " + "; ".join(parts) + "."
    )


def with_se(change: float, se: float) -> str:
    """``+1.8 ± 0.6``: a change and its s.e. to the s.e.'s first significant decimal (at least one decimal)."""
    if se is None or math.isnan(se) or se <= 0:
        return f"{change:+.3g}"
    decimals = max(1, -math.floor(math.log10(se)))
    return f"{change:+.{decimals}f} ± {se:.{decimals}f}"


def page(
    runs: dict[int, str], aggregates: dict[str, pd.DataFrame], claim_table: pd.DataFrame, notes: list[str] | None = None
) -> str:
    """The aggregate page (Markdown): which runs, each table's view, the claims and their verdicts."""
    lines = [
        "# The replicates: every table over the trainings",
        "",
        f"{len(runs)} trainings of the whole run, one per seed (every model trained again from its seed):",
        "",
        *[f"* seed {s}: `{d}/`" for s, d in runs.items()],
        "",
        "A cell is the mean over the trainings ± their standard deviation [smallest, largest]; the CSVs beside "
        "this page (`tables/*.csv`) have every quantity of every cell with each training's value. A claim is a "
        f"change beyond {CLAIM_Z:g} s.e. (paired for a DLLM row); it *holds* where it does in every training.",
        "",
    ]
    lines += [f"{n}" for n in (notes or [])]
    for name, agg in aggregates.items():
        v = view(name, agg)
        lines += [f"## {name}", "", v if v is not None else f"(every cell: `tables/{name}.csv`)", ""]
    lines += ["## Claims over the trainings", ""]
    if claim_table.empty:
        lines.append("No change with an s.e. in these tables.")
    else:
        seeds = [c[len("z_") :] for c in claim_table.columns if c.startswith("z_")]
        header = ["table", "cell", *[f"seed {s}: change ± s.e. (z)" for s in seeds], "verdict"]
        rows = []
        for r in claim_table.to_dict("records"):
            rows.append(
                [
                    r["table"],
                    plain(r["cell"]),
                    *[
                        "–"
                        if math.isnan(r.get(f"seed_{s}", float("nan")))
                        else f"{with_se(r[f'seed_{s}'], r.get(f'se_{s}', float('nan')))} ({r[f'z_{s}']:+.1f})"
                        for s in seeds
                    ],
                    r["verdict"],
                ]
            )
        lines.append(md_table(header, rows))
    return "\n".join(lines) + "\n"


__all__ = [
    "CLAIM_Z",
    "PAGE_VIEWS",
    "TABLE_KEYS",
    "aggregate",
    "break_even_claims",
    "break_even_view",
    "judgement_check",
    "claims",
    "keys_of",
    "page",
    "quantities_of",
    "ratio_line",
    "verdict",
    "view",
    "with_se",
]
