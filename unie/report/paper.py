"""The paper's numbers beside ours (``results/tables/paper_vs_ours.{tex,md,csv}``).

The paper's values come from ``config/paper_values.yaml`` (one place, each with its .tex label and line, and the
mapping of the paper's rows and columns to ours); ours from the workflow's table CSVs.  In the **toy** profile the
scales differ (a synthetic language with a known π and tiny CPU models against OpenWebText, GPT-2-size models and
LLaDA-8B), so only orderings are compared: per column, which row is best in the paper and here (among the rows both
have), and Kendall's τ_b between the two orderings.  In the **paper** profile the values are comparable and each
cell also gets ours − paper.

Everything here is pure: parsed inputs in, DataFrames and text out.
"""

from __future__ import annotations

import math

import pandas as pd

ENTROPY = "Entropy"


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
            tx += dx == 0
            ty += dy == 0
            C += dx * dy > 0
            D += dx * dy < 0
    n0 = n * (n - 1) // 2
    den = math.sqrt((n0 - tx) * (n0 - ty))
    return (C - D) / den if den > 0 else None


# ---- the paper's side ------------------------------------------------------------------------------------------


def paper_columns(spec: dict) -> list[str]:
    """The table's columns: Table 2's are ``"<evaluator> <steps>"`` (evaluator-major), then ``"Entropy <steps>"``."""
    if spec["kind"] == "genppl":
        cols = [f"{e} {s}" for e in spec["evaluators"] for s in spec["steps"]]
        if any("entropy" in row for row in spec["rows"].values()):
            cols += [f"{ENTROPY} {s}" for s in spec["steps"]]
        return cols
    return list(spec["columns"])


def paper_row(spec: dict, name: str) -> list[float | None]:
    """The paper's values of a row in the order of :func:`paper_columns` (None: no value)."""
    row = spec["rows"][name]
    values = list(row["values"])
    if spec["kind"] == "genppl" and len(paper_columns(spec)) > len(values):
        values += list(row.get("entropy") or [None] * len(spec["steps"]))
    return values


def ranked(spec: dict, column: str) -> bool:
    """Whether a column has a better direction (Table 2's entropy has none: no best row, no ordering)."""
    return not (spec["kind"] == "genppl" and column.startswith(ENTROPY + " "))


# ---- our side --------------------------------------------------------------------------------------------------


def step_map(paper_steps: list[int], our_steps: list[int]) -> dict[int, int]:
    """Our step count -> the paper's at the same fraction of L (each side's largest step count is its L: the paper's
    128 ... 1024 are L/8 ... L).  Our step counts at a fraction the paper lacks are left out."""
    if not paper_steps or not our_steps:
        return {}
    P, S = max(paper_steps), max(our_steps)
    return {s: p for s in our_steps for p in paper_steps if s * P == p * S}


def ours_long(
    spec: dict, table: pd.DataFrame, *, evaluators: list[str] | None = None, steps: list[int] | None = None
) -> dict[tuple[str, str], float]:
    """Our value for each (paper row, paper column) of one table, read from our table CSV ``table``.

    * ``ppl`` (Table 1): row label = paper row; column ``i`` = our domain ``ours_columns[i]``; value ``ppl``;
    * ``genppl`` (Table 2): row label = paper row; the paper's evaluator ``j`` = our ``evaluators[j]`` (the profile's
      order), a step count by :func:`step_map`; values ``genppl`` and ``entropy_bits``;
    * ``long`` (Table 3, the k/w sweeps): our ``row``, ``column``, ``value``; the paper row is the first of its
      ``ours`` keys present in our ``row`` column (its own name without ``ours``), the column is ours by name.
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
            raise ValueError("Table 2 needs our evaluators (in the paper's order) and our step counts")
        to_paper = step_map(spec["steps"], steps)
        for r in table.itertuples():
            st = to_paper.get(int(r.steps))
            if st is None:
                continue
            if r.evaluator in evaluators[: len(spec["evaluators"])] and pd.notna(r.genppl):
                out[(r.row, f"{spec['evaluators'][evaluators.index(r.evaluator)]} {st}")] = float(r.genppl)
            if pd.notna(r.entropy_bits):
                out.setdefault((r.row, f"{ENTROPY} {st}"), float(r.entropy_bits))
    elif kind == "long":
        present = set(table.row)
        for name, row in spec["rows"].items():
            key = next((k for k in row.get("ours", [name]) if k in present), None)
            for r in table[table.row == key].itertuples():
                if r.column in spec["columns"] and pd.notna(r.value):
                    out[(name, r.column)] = float(r.value)
    else:
        raise ValueError(f"no reader of our results for a {kind!r} table")
    return out


def missing_reason(key: str) -> str:
    """Why a table of the paper has no counterpart here."""
    if key.startswith("table_app_"):
        return (
            f"this profile does not produce `{key}` (the DLLM {key.removeprefix('table_app_')} sweep of the "
            f"paper's appendix: set `dllm.sweeps.sets.{key.removeprefix('table_')}`), so there is nothing of ours "
            "to put beside it."
        )
    return f"this profile does not produce `{key}`."


# ---- the comparison --------------------------------------------------------------------------------------------


def compare(spec: dict, ours: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Long frame ``row, column, paper, ours, diff`` (ours − paper) over the paper's cells."""
    rows = []
    for name in spec["rows"]:
        for c, v in zip(paper_columns(spec), paper_row(spec, name)):
            if v is None:
                continue
            o = ours.get((name, c))
            rows.append(
                {"row": name, "column": c, "paper": float(v), "ours": o, "diff": None if o is None else o - float(v)}
            )
    return pd.DataFrame(rows, columns=["row", "column", "paper", "ours", "diff"])


def _best(sub: pd.DataFrame, col: str, lower: bool) -> set[str]:
    """Every row tied for the best value of ``col``."""
    best = sub[col].min() if lower else sub[col].max()
    return set(sub[sub[col] == best].row)


def not_comparable(spec: dict, table: pd.DataFrame) -> dict[str, str]:
    """Rows of our table that are not ranked against the others (row -> why), as our own table treats them: in
    Table 1 a row whose estimator is not an upper bound on perplexity (``bound`` false: it can fall below the data's
    own) and one whose estimator is a reference row's (``reference_estimator``: EDLM-CoAR, in expectation the AR's
    NLL).  They stay in the cells, out of "best" and of Kendall's τ_b."""
    out = {}
    if spec.get("kind") == "ppl":
        if "bound" in table:
            out.update({r: "not an upper bound on perplexity" for r in table.loc[table["bound"].eq(False), "row"]})
        if "reference_estimator" in table:
            out.update(
                {
                    r: "in expectation the AR reference row's likelihood"
                    for r in table.loc[table["reference_estimator"].eq(True), "row"]
                }
            )
    return out


def unranked_columns(spec: dict, table: pd.DataFrame) -> dict[str, str]:
    """Columns in which our table bolds no row (column -> why): a Table 3 column where every row is within 2 s.e. of
    guessing (its CSV's ``best`` false throughout, :func:`unie.report.tables.table3`).  They stay in the cells, out of
    "best" and of Kendall's τ_b, as out of our bold."""
    if spec.get("kind") != "long" or not {"best", "column", "row"} <= set(table.columns):
        return {}
    rows = table[~table.row.astype(str).str.contains("__")]  # the room rows are no rows of the ranking
    return {c: "every row at chance" for c, g in rows.groupby("column", sort=False) if not g.best.any()}


def orderings(spec: dict, df: pd.DataFrame, excluded=(), skip_columns=()) -> pd.DataFrame:
    """Per ranked column (``skip_columns`` left out: :func:`unranked_columns`), among the rows both have
    (``reference`` rows and ``excluded`` ones left out: :func:`not_comparable`): the best row(s) in the paper and
    here (ties joined by " = ", in the paper's row order); ``agree``: "yes" (the same best row or rows), "tie" (a row
    best in both, tied with others on one side) or "no"; Kendall's τ_b between the two orderings; the row count."""
    lower = spec["lower_is_better"]
    ref = set(spec.get("reference", [])) | set(excluded)
    order = {name: i for i, name in enumerate(spec["rows"])}
    out = []
    for c in paper_columns(spec):
        if not ranked(spec, c) or c in skip_columns:
            continue
        sub = df[(df.column == c) & df.ours.notna() & ~df.row.isin(ref)]
        if len(sub) < 2:
            continue
        best_p, best_o = _best(sub, "paper", lower), _best(sub, "ours", lower)
        agree = "yes" if best_p == best_o else "tie" if best_p & best_o else "no"
        out.append(
            {
                "column": c,
                "rows": len(sub),
                "best_paper": " = ".join(sorted(best_p, key=order.get)),
                "best_ours": " = ".join(sorted(best_o, key=order.get)),
                "agree": agree,
                "kendall_tau_b": kendall_tau_b(list(sub.paper), list(sub.ours)),
            }
        )
    return pd.DataFrame(out, columns=["column", "rows", "best_paper", "best_ours", "agree", "kendall_tau_b"])


def summary(order: pd.DataFrame) -> str:
    """One sentence: in how many columns the best row agrees, and the median τ_b."""
    if order.empty:
        return "No column has two rows in common: no ordering to compare."
    same, tie = int((order.agree == "yes").sum()), int((order.agree == "tie").sum())
    text = f"The best row is the same in {same} of {len(order)} columns"
    if tie:
        text += f" (and best in both but tied with another row on one side in {tie} more)"
    taus = order.kendall_tau_b.dropna()
    if len(taus):
        text += f"; median Kendall τ_b = {taus.median():+.2f} over {len(taus)} columns"
    return text + "."


def differences(df: pd.DataFrame, decimals: int) -> str:
    """Paper profile: one sentence on the size of ours − paper over the cells both have."""
    d = df.dropna(subset=["ours"])
    if d.empty:
        return "No cell of ours to compare."
    worst = d.loc[d["diff"].abs().idxmax()]
    return (
        f"Over the {len(d)} cells both have, median |ours − paper| = {d['diff'].abs().median():.{decimals}f}; "
        f"the largest is {worst.row}, {worst.column}: {worst['diff']:+.{decimals}f}."
    )


def sections(values: dict, tables: dict[str, pd.DataFrame], *, evaluators: list[str], steps: list[int]) -> list[dict]:
    """One section per table of the paper values, in their order: the comparison when ``tables`` has our table of
    that key, else the reason it has none; then our tables the paper values lack, each with that reason."""
    out = []
    for key, spec in values["tables"].items():
        if key not in tables:
            out.append({"key": key, "spec": spec, "reason": missing_reason(key)})
            continue
        df = compare(spec, ours_long(spec, tables[key], evaluators=evaluators, steps=steps))
        note = None
        if spec["kind"] == "genppl":
            mapped = step_map(spec["steps"], steps)
            note = (
                "Columns: the paper's "
                + ", ".join(spec["evaluators"])
                + " are our evaluators "
                + ", ".join(evaluators[: len(spec["evaluators"])])
                + "; its step counts "
                + ", ".join(f"{p} = ours {s}" for s, p in mapped.items())
                + " (the same fraction of L).  Entropy is not ranked; ours is per-sample unigram entropy in bits "
                "(the paper states no unit)."
            )
        elif key.startswith("table_app_"):
            note = (
                "Rows by the varied value; accuracy only: our throughput (tokens/s, in our table) is a measurement "
                "on other hardware and is not compared."
            )
        elif spec["kind"] == "long" and any("ours" in r for r in spec["rows"].values()):
            note = "Rows: the paper's row is ours as listed in config/paper_values.yaml (`ours`); columns by name."
        left_out = not_comparable(spec, tables[key])
        if left_out:
            why = "; ".join(f"{r} ({w})" for r, w in left_out.items())
            note = ((note + " ") if note else "") + (
                f"Left out of the best and of τ_b, as our table leaves them out of its bold: {why}."
            )
        columns_out = unranked_columns(spec, tables[key])
        if columns_out:
            why = "; ".join(f"{c} ({w})" for c, w in columns_out.items())
            note = ((note + " ") if note else "") + (
                f"Columns left out of the best and of τ_b, as our table has no best in them: {why}."
            )
        out.append(
            {"key": key, "spec": spec, "df": df, "order": orderings(spec, df, left_out, columns_out), "note": note}
        )
    for key in tables:
        if key not in values["tables"]:
            out.append(
                {
                    "key": key,
                    "spec": {"title": key, "label": "–"},
                    "reason": f"config/paper_values.yaml has no paper values for `{key}`.",
                }
            )
    return out


# ---- rendering -------------------------------------------------------------------------------------------------

SCALES = (
    "The scales differ: this is the toy world (a synthetic language with an exactly known distribution, "
    "tiny CPU models, toy benchmarks) against the paper's OpenWebText / GPT-2-size / LLaDA-8B / Dream-7B "
    "numbers, so the values are not comparable and only the orderings are: per column, the best row in the "
    "paper and here among the rows both have, and Kendall's τ_b between the two orderings (+1: the same "
    "order, −1: reversed).  Cells are paper / ours."
)
PAPER = "Cells are paper / ours (ours − paper); the orderings are compared as well."


def _num(v, nd: int) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _cell(p, o, d, nd: int, paper_profile: bool) -> str:
    if o is None or (isinstance(o, float) and math.isnan(o)):
        return f"{_num(p, nd)} / –"
    return f"{_num(p, nd)} / {_num(o, nd)}" + (f" ({d:+.{nd}f})" if paper_profile else "")


# the width budget of one tabular, in characters of its widest cells (about a text width in \small): wider tables
# are split into several tabulars of fewer columns, each with the row names
WIDTH = 76


def column_chunks(names: list[str], cells: list[list[str]], header: list[str], width: int = WIDTH) -> list[list[int]]:
    """Split the value columns into consecutive chunks whose widest cells (and the row names) fit ``width``."""
    name_w = max([len(n) for n in names] + [3])
    col_w = [max([len(h)] + [len(r[j]) for r in cells]) + 3 for j, h in enumerate(header)]
    chunks, cur, used = [], [], name_w
    for j, w in enumerate(col_w):
        if cur and used + w > width:
            chunks.append(cur)
            cur, used = [], name_w
        cur.append(j)
        used += w
    return chunks + [cur] if cur else chunks


# the most table lines (rows, header, rules) one float holds: about a page in \small with its caption
PAGE_LINES = 48


def page_groups(tabulars: list[pd.DataFrame], lines: int = PAGE_LINES) -> list[list[pd.DataFrame]]:
    """Consecutive groups of tabulars, each group short enough for one float on a page."""
    groups, cur, used = [], [], 0
    for t in tabulars:
        n = len(t) + 5
        if cur and used + n > lines:
            groups.append(cur)
            cur, used = [], 0
        cur.append(t)
        used += n
    return groups + [cur] if cur else groups


def _float(caption: str, label: str, tabulars: list[pd.DataFrame]) -> list[str]:
    """One ``table`` float holding ``tabulars`` (frames of LaTeX cells; each rendered by ``Styler.to_latex`` with
    booktabs rules and boxed to the text width), one under the other."""
    from .tables import _boxed

    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\caption{" + caption + "}", r"\label{" + label + "}"]
    for i, cells in enumerate(tabulars):
        if i:
            out.append(r"\par\medskip")
        tex = cells.style.hide(axis="index").to_latex(column_format="l" + "c" * (cells.shape[1] - 1), hrules=True)
        out += _boxed(tex.splitlines())
    return out + [r"\end{table}", ""]


def render(parts: list[dict], profile: str) -> tuple[str, str, pd.DataFrame]:
    """``(markdown, latex, long frame)`` for the sections ``{key, spec, df, order[, note]}`` or ``{key, spec,
    reason}``, in order.  The LaTeX is one ``table`` float per compared table (its caption: the title, the note,
    the summary sentence; a table wider than the text is split into tabulars of fewer columns); a table not
    compared is a comment line with the reason."""
    paper_profile = profile == "paper"
    intro = PAPER if paper_profile else SCALES
    md = ["# The paper's numbers beside ours", "", intro]
    tex = [
        r"% LaTeX packages: booktabs, adjustbox",
        r"% generated by the workflow (rule paper_vs_ours) from config/paper_values.yaml and the table CSVs",
        "",
    ]
    longs, first = [], True
    for s in parts:
        spec = s["spec"]
        md += ["", f"## {spec['title']} — `{spec['label']}`", ""]
        if "reason" in s:
            md.append(f"Not compared: {s['reason']}")
            tex += [f"% {spec['title']}: not compared: {s['reason']}".replace("\n", " "), ""]
            continue
        if s.get("note"):
            md += [s["note"], ""]
        df, order, nd = s["df"], s["order"], spec.get("decimals", 2)
        longs.append(df.assign(table=s["key"]))
        cols = paper_columns(spec)
        md += ["| row | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        cells = df.set_index(["row", "column"])
        grid = []
        for name in spec["rows"]:
            row = []
            for c in cols:
                if (name, c) not in cells.index:
                    row.append("")
                    continue
                hit = cells.loc[(name, c)]
                row.append(_cell(hit.paper, hit.ours, hit["diff"], nd, paper_profile))
            md.append(f"| {name} | " + " | ".join(row) + " |")
            grid.append(row)
        names = [_tex(n) for n in spec["rows"]]
        tex_grid = [[_tex(c) for c in row] for row in grid]
        tabulars = []
        for chunk in column_chunks(list(spec["rows"]), grid, cols):
            tabulars.append(pd.DataFrame({"row": names, **{_tex(cols[j]): [r[j] for r in tex_grid] for j in chunk}}))
        caption = [_tex(spec["title"]) + "."]
        if first:
            caption.append(_tex(intro))
            first = False
        else:
            caption.append("Cells are paper / ours" + (" (ours $-$ paper)." if paper_profile else "."))
        if s.get("note"):
            caption.append(_tex(s["note"]))
        if paper_profile:
            md += ["", differences(df, nd)]
            caption.append(_tex(differences(df, nd)))
        if not order.empty:
            md += [
                "",
                "| column | rows | best in the paper | best here | same | Kendall τ_b |",
                "|---|---|---|---|---|---|",
            ]
            rows = []
            for r in order.itertuples():
                tau = "–" if r.kendall_tau_b is None or pd.isna(r.kendall_tau_b) else f"{r.kendall_tau_b:+.2f}"
                md.append(f"| {r.column} | {r.rows} | {r.best_paper} | {r.best_ours} | {r.agree} | {tau} |")
                rows.append([_tex(r.column), str(r.rows), _tex(r.best_paper), _tex(r.best_ours), r.agree, _tex(tau)])
            tabulars.append(
                pd.DataFrame(rows, columns=["column", "rows", "best (paper)", "best (ours)", "same", r"$\tau_b$"])
            )
            caption.append(
                "Last tabular: per column, the best row in the paper and here and Kendall's $\\tau_b$ "
                "between the two orderings."
            )
        md += ["", summary(order)]
        caption.append(_tex(summary(order)))
        label = f"tab:paper-vs-ours-{s['key'].replace('_', '-')}"
        for i, group in enumerate(page_groups(tabulars)):  # floats that fit a page each
            cap = " ".join(caption) if i == 0 else _tex(spec["title"]) + r" (continued from Table~\ref{" + label + "})."
            tex += _float(cap, label if i == 0 else f"{label}-{i + 1}", group)
    long = (
        pd.concat(longs, ignore_index=True)
        if longs
        else pd.DataFrame(columns=["row", "column", "paper", "ours", "diff", "table"])
    )
    return "\n".join(md) + "\n", "\n".join(tex) + "\n", long


def _tex(text: str) -> str:
    """Escape LaTeX's special characters in a plain-text cell (τ_b, π, |, − and – written for LaTeX)."""
    out = str(text).replace("τ_b", "\0")
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("`", ""),
        ("π", r"$\pi$"),
        ("|", "$|$"),
        ("−", "$-$"),
        ("–", "--"),
        ("—", "---"),
    ):
        out = out.replace(a, b)
    return out.replace("\0", r"$\tau_b$")
