"""The paper's numbers beside ours (``results/tables/paper_vs_ours.{tex,md}``).

The paper's values come from ``config/paper_values.yaml`` (one place, each with its .tex label and line); ours from
the workflow's table CSVs.  In the **toy** profile the scales differ (a synthetic language with a known π vs
OpenWebText, tiny models vs LLaDA-8B), so only orderings are compared: per column, which row is best in the paper
and here (among the rows both have), and Kendall's τ_b between the two orderings.  In the **paper** profile the
values are comparable and each cell also gets ours − paper.

Everything here is pure: parsed inputs in, DataFrames and text out.
"""

from __future__ import annotations

import math

import pandas as pd


def kendall_tau_b(x: list[float], y: list[float]) -> float | None:
    """Kendall's τ_b of two paired lists: ``(C − D) / sqrt((n0 − t_x)(n0 − t_y))`` with ``n0 = n(n−1)/2`` pairs,
    ``C``/``D`` the concordant/discordant pairs and ``t_x``/``t_y`` the pairs tied in ``x``/``y``.  None when
    undefined (fewer than 2 pairs, or one side all tied)."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"paired lists of different lengths {n} and {len(y)}")
    C = D = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                tx += 1
            if dy == 0:
                ty += 1
            if dx * dy > 0:
                C += 1
            elif dx * dy < 0:
                D += 1
    n0 = n * (n - 1) // 2
    den = math.sqrt((n0 - tx) * (n0 - ty))
    return (C - D) / den if den > 0 else None


def ours_long(spec: dict, table: pd.DataFrame, *, evaluators: list[str] | None = None,
              steps: list[int] | None = None) -> dict[tuple[str, str], float]:
    """Our value for each (paper row, paper column) of one table, read from our table CSV ``table``.

    * ``ppl`` (Table 1): row label = paper row; column ``i`` = our domain ``ours_columns[i]``; value ``ppl``;
    * ``genppl`` (Table 2): row label = paper row; paper evaluator ``j`` = our ``evaluators[j]`` (the profile's
      order), paper step count ``s`` = our ``steps[s]`` (Data and AR are at our last = L); value ``genppl``;
    * ``dllm`` (Table 3): the first of the paper row's ``ours`` keys present in our ``row`` column; column by
      its name (our ``column`` holds the paper's column names); value ``value``.
    Missing cells are left out."""
    out = {}
    kind = spec["kind"]
    if kind == "ppl":
        for c, dom in zip(spec["columns"], spec["ours_columns"]):
            for r in table[table.domain == dom].itertuples():
                if pd.notna(r.ppl):
                    out[(r.row, c)] = float(r.ppl)
    elif kind == "genppl":
        if evaluators is None or steps is None:
            raise ValueError("Table 2 needs our evaluators and step counts, in the profile's order")
        for j, ev_paper in enumerate(spec["evaluators"][: len(evaluators)]):
            for s, st_paper in enumerate(spec["steps"][: len(steps)]):
                sub = table[(table.evaluator == evaluators[j]) & (table.steps == steps[s])]
                for r in sub.itertuples():
                    out[(r.row, f"{ev_paper} {st_paper}")] = float(r.genppl)
    elif kind == "dllm":
        present = set(table.row)
        for name, row in spec["rows"].items():
            key = next((k for k in row.get("ours", []) if k in present), None)
            if key is None:
                continue
            for r in table[table.row == key].itertuples():
                if r.column in spec["columns"] and pd.notna(r.value):
                    out[(name, r.column)] = float(r.value)
    else:
        raise ValueError(f"no reader of our results for a {kind!r} table")
    return out


def paper_columns(spec: dict) -> list[str]:
    if spec["kind"] == "genppl":
        return [f"{e} {s}" for e in spec["evaluators"] for s in spec["steps"]]
    return list(spec["columns"])


def compare(spec: dict, ours: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Long frame ``row, column, paper, ours, diff`` (ours − paper) over the paper's cells."""
    rows = []
    for name, row in spec["rows"].items():
        for c, v in zip(paper_columns(spec), row["values"]):
            if v is None:
                continue
            o = ours.get((name, c))
            rows.append({"row": name, "column": c, "paper": float(v), "ours": o,
                         "diff": None if o is None else o - float(v)})
    return pd.DataFrame(rows, columns=["row", "column", "paper", "ours", "diff"])


def _best(sub: pd.DataFrame, col: str, lower: bool) -> list[str]:
    """Every row tied for the best value of ``col``."""
    best = sub[col].min() if lower else sub[col].max()
    return list(sub[sub[col] == best].row)


def orderings(spec: dict, df: pd.DataFrame) -> pd.DataFrame:
    """Per column, among the rows both have (``reference`` rows left out): the best row(s) in the paper and here
    (ties joined by " = "), whether they agree (a row best in both), Kendall's τ_b and the number of rows."""
    lower = spec["lower_is_better"]
    ref = set(spec.get("reference", []))
    out = []
    for c in paper_columns(spec):
        sub = df[(df.column == c) & df.ours.notna() & ~df.row.isin(ref)]
        if len(sub) < 2:
            continue
        best_p = _best(sub, "paper", lower)
        best_o = _best(sub, "ours", lower)
        out.append({"column": c, "rows": len(sub), "best_paper": " = ".join(best_p), "best_ours": " = ".join(best_o),
                    "agree": bool(set(best_p) & set(best_o)),
                    "kendall_tau_b": kendall_tau_b(list(sub.paper), list(sub.ours))})
    return pd.DataFrame(out, columns=["column", "rows", "best_paper", "best_ours", "agree", "kendall_tau_b"])


def _num(v) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}".rstrip("0").rstrip(".")


def _cell(p, o, d, paper_profile: bool) -> str:
    if o is None or (isinstance(o, float) and math.isnan(o)):
        return f"{_num(p)} / –"
    return f"{_num(p)} / {_num(o)}" + (f" ({d:+.2f})" if paper_profile else "")


SCALES = ("The scales differ: this is the toy world (a synthetic language with an exactly known distribution, "
          "tiny CPU models, toy benchmarks) against the paper's OpenWebText / LLaDA-8B / Dream-7B numbers, so only "
          "the orderings are compared: per column, the best row in the paper and here among the rows both have, "
          "and Kendall's tau-b between the two orderings (1: same order, -1: reversed).")


def render(sections: list[dict], profile: str) -> tuple[str, str, pd.DataFrame]:
    """``(markdown, latex, long frame)`` for the sections ``{key, spec, df, order}`` or ``{key, spec, reason}``."""
    paper_profile = profile == "paper"
    md = ["# The paper's numbers beside ours", ""]
    md.append(("Cells are paper / ours (ours − paper)." if paper_profile else SCALES + " Cells are paper / ours."))
    tex = [r"% generated by the workflow (rule paper_vs_ours) from config/paper_values.yaml and the table CSVs"]
    longs = []
    for s in sections:
        spec = s["spec"]
        md += ["", f"## {spec['title']} — `{spec['label']}`", ""]
        tex += ["", r"\paragraph{" + _tex(spec["title"]) + "}"]
        if "reason" in s:
            md.append(f"Not compared: {s['reason']}")
            tex.append("Not compared: " + _tex(s["reason"]))
            continue
        if s.get("note"):
            md += [s["note"], ""]
            tex += [_tex(s["note"]), ""]
        df, order = s["df"], s["order"]
        longs.append(df.assign(table=s["key"]))
        cols = paper_columns(spec)
        md += ["| row | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        tex += [r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
                "row & " + " & ".join(_tex(c) for c in cols) + r" \\", r"\midrule"]
        for name in spec["rows"]:
            cells = []
            for c in cols:
                hit = df[(df.row == name) & (df.column == c)]
                cells.append("" if hit.empty else _cell(hit.paper.iloc[0], hit.ours.iloc[0], hit["diff"].iloc[0],
                                                         paper_profile))
            md.append(f"| {name} | " + " | ".join(cells) + " |")
            tex.append(_tex(name) + " & " + " & ".join(_tex(c) for c in cells) + r" \\")
        tex += [r"\bottomrule", r"\end{tabular}", ""]
        if order.empty:
            md += ["", "No column has two rows in common: no ordering to compare."]
            continue
        agree = int(order.agree.sum())
        taus = order.kendall_tau_b.dropna()
        md += ["", "| column | rows | best in the paper | best here | same | Kendall τ_b |", "|---|---|---|---|---|---|"]
        tex += [r"\begin{tabular}{lrllcr}", r"\toprule",
                r"column & rows & best (paper) & best (ours) & same & $\tau_b$ \\", r"\midrule"]
        for r in order.itertuples():
            tau = "–" if r.kendall_tau_b is None or pd.isna(r.kendall_tau_b) else f"{r.kendall_tau_b:+.2f}"
            md.append(f"| {r.column} | {r.rows} | {r.best_paper} | {r.best_ours} | {'yes' if r.agree else 'no'} | {tau} |")
            tex.append(" & ".join([_tex(r.column), str(r.rows), _tex(r.best_paper), _tex(r.best_ours),
                                   "yes" if r.agree else "no", tau]) + r" \\")
        tex += [r"\bottomrule", r"\end{tabular}"]
        line = (f"The best row agrees in {agree} of {len(order)} columns; median τ_b = "
                f"{taus.median():+.2f} over {len(taus)} columns." if len(taus) else
                f"The best row agrees in {agree} of {len(order)} columns.")
        md += ["", line]
        tex += ["", _tex(line)]
    long = pd.concat(longs, ignore_index=True) if longs else pd.DataFrame()
    return "\n".join(md) + "\n", "\n".join(tex) + "\n", long


def _tex(text: str) -> str:
    """Escape LaTeX's special characters in a plain-text cell (τ written as $\\tau$)."""
    out = str(text)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("τ", r"$\tau$"), ("−", "-"), ("–", "--"), ("π", r"$\pi$")):
        out = out.replace(a, b)
    return out
