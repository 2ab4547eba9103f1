"""Result records in, Markdown out: the regenerated tables of ``docs/results.md``.

Pure functions: each takes the DataFrame a table rule wrote (``results/tables/*.csv``,
``results/figures/*.csv``) or a parsed JSON record and returns Markdown text.  Nothing here reads a file or
computes a reported number; it only lays the numbers out (rule ``docs`` reads the files).
"""

from __future__ import annotations

import math
import re

import pandas as pd

# LaTeX in the tables' row labels -> plain text
_LATEX = [
    (r"$\pi$", "π"),
    (r"$^\dagger$", "†"),
    (r"$^\ddagger$", "‡"),
    (r"$^\S$", "§"),
    (r"\ddagger", "‡"),
    (r"\dagger", "†"),
    ("$", ""),
]


def plain(label) -> str:
    """A row label as Markdown text: the tables' LaTeX symbols replaced, pipes escaped."""
    text = str(label)
    for latex, char in _LATEX:
        text = text.replace(latex, char)
    return text.replace("|", "\\|")


def num(x, digits: int = 1) -> str:
    """``x`` with ``digits`` decimals; a missing value as ``–``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{float(x):.{digits}f}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _pivot(df: pd.DataFrame, index: str, columns: str, cell) -> tuple[list, list, dict]:
    """Rows and columns in their order of appearance, and ``cell(record)`` per (row, column)."""
    rows, cols = list(dict.fromkeys(df[index])), list(dict.fromkeys(df[columns]))
    cells = {(r[index], r[columns]): cell(r) for r in df.to_dict("records")}
    return rows, cols, cells


def table1(df: pd.DataFrame) -> str:
    """Table 1: perplexity per domain; the last column is the range of the NLL's standard error (nats).  As in the
    LaTeX table: the best of each column among the bounds in bold (the CSV's ``best``), a row whose estimator is not
    an upper bound on perplexity (``bound`` false) marked † with a note under the table."""
    has_best = "best" in df

    def cell(r):
        text = num(r["ppl"], 2)
        return f"**{text}**" if has_best and r["best"] == True else text  # noqa: E712

    rows, cols, cells = _pivot(df, "row", "domain", cell)
    not_bound = set(df.loc[df["bound"] == False, "row"]) if "bound" in df else set()  # noqa: E712 (NaN: no value)
    reference = set(df.loc[df["reference_estimator"] == True, "row"]) if "reference_estimator" in df else set()  # noqa: E712
    body = []
    for row in rows:
        se = df.loc[df["row"] == row, "nll_se"].dropna()
        se_text = f"{se.min():.3f}–{se.max():.3f}" if len(se) else "–"
        mark = " †" if row in not_bound else " §" if row in reference else ""
        body.append([plain(row) + mark] + [cells.get((row, c), "–") for c in cols] + [se_text])
    out = md_table(["row", *cols, "s.e. of NLL (nats)"], body)
    if has_best:
        out += "\n\nIn bold: the best of each column among the bounds (data and AR left out)."
    if not_bound:
        out += (
            " † Not an upper bound on perplexity, so never bold: its value can fall below the data's own "
            "perplexity (Uni-E's closed-form log F leaves the tokens revealed between t and s unscored; EDLM's "
            "one-sample plug-in for log F is biased low)."
        )
    if reference:
        out += (
            " § Its estimator is in expectation the AR proxy's own NLL, the AR reference row's likelihood, so it "
            "is left out of the bold like that row."
        )
    return out


def table2(df: pd.DataFrame, evaluator: str) -> str:
    """Table 2 under one evaluator: Gen PPL per step count, the NLL's s.e., entropy and excess NLL at most steps."""
    from .tables import selection_label

    sub = df[df["evaluator"] == evaluator]
    rows, steps, cells = _pivot(sub, "row", "steps", lambda r: num(r["genppl"], 1))
    steps = sorted(steps)
    body = []
    for row in rows:
        own = sub[sub["row"] == row]
        last = own.loc[own["steps"].idxmax()]
        rule = selection_label(own, latex=False)  # an energy row names its candidate selection rule
        body.append(
            [plain(row) + (f" ({rule})" if rule else "")]
            + [cells.get((row, s), "") for s in steps]
            + [
                f"{own['nll_se'].min():.3f}–{own['nll_se'].max():.3f}",
                num(last["entropy_bits"], 2),
                num(last["excess_nll"], 3),
            ]
        )
    return md_table(
        [
            "row",
            *[f"{s} steps" for s in steps],
            "s.e. of NLL (nats)",
            f"entropy (bits, {steps[-1]} steps)",
            f"excess NLL (nats, {steps[-1]} steps)",
        ],
        body,
    )


def dllm_table(df: pd.DataFrame) -> str:
    """Table 3 (or the appendix's full table): accuracy in %, the delta to the backbone ± its paired s.e.,
    the row's average over the columns."""

    def cell(r):
        text = num(r["value"], 1)
        if not pd.isna(r.get("delta")):
            se = "" if pd.isna(r.get("delta_se")) else f" ± {r['delta_se']:.1f}"
            text += f" ({r['delta']:+.1f}{se})"
        return text

    rows, cols, cells = _pivot(df, "row", "column", cell)
    labels = dict(zip(df["row"], df["label"]))
    inside = df["in_average"].astype(bool) if "in_average" in df else pd.Series(True, index=df.index)
    out = set(df.loc[~inside, "column"])
    body = []
    for row in rows:
        avg = df.loc[(df["row"] == row) & inside, "value"].mean()
        body.append([plain(labels[row])] + [cells.get((row, c), "–") for c in cols] + [num(avg, 1)])
    table = md_table(["row", *[c + (" *" if c in out else "") for c in cols], "avg"], body)
    if out:
        table += "\n\n\\* not in the average (every row answers it at the chance of guessing one of four letters)."
    if {"model", "proxy", "delta_to"} <= set(
        df.columns
    ):  # the proxy as a multiple of each backbone (Table 3's caption)
        from .tables import proxy_ratios

        spec = {
            r: {k: (None if pd.isna(v) else v) for k, v in g.iloc[0][["model", "proxy", "delta_to", "label"]].items()}
            for r, g in df.groupby("row", sort=False)
        }
        ratio = proxy_ratios(spec, df[inside].groupby("row", sort=False)["value"].mean())
        if ratio:
            table += "\n\n" + plain(ratio.replace("$\\times$", "×").replace("\\%", "%"))
    return table


def selection_md(df: pd.DataFrame) -> str:
    """The selection-rule table: average accuracy ± s.e., the paired change ± s.e., and the window's disagreement,
    steering and changed-completion shares (%)."""

    def pct(v):
        return "–" if pd.isna(v) else f"{100 * v:.0f}"

    body = []
    for r in df.to_dict("records"):
        base = r["row"] == r["backbone"]
        delta = "–" if base or pd.isna(r.get("delta")) else f"{r['delta']:+.1f} ± {r['delta_se']:.1f}"
        body.append(
            [
                plain(r["label"]),
                "–" if base else str(r.get("energy") or "–"),
                "–" if base else str(r.get("selection") or "–"),
                f"{num(r['avg'], 1)} ± {num(r['avg_se'], 1)}",
                delta,
                pct(r.get("disagree")),
                pct(r.get("steered")),
                "–" if base else pct(r.get("changed")),
                pct(r.get("answer")),
                pct(r.get("padding")),
            ]
        )
    return md_table(
        [
            "row",
            "energy",
            "selection",
            "avg (%)",
            "Δ avg",
            "disagree (%)",
            "steered (%)",
            "changed (%)",
            "window (% of an answer)",
            "padding (% of the window)",
        ],
        body,
    )


def map_md(df: pd.DataFrame) -> str:
    """The map (``table_app_map.csv``): per candidate draw and window, each backbone's room (ceiling / floor of the
    change against the backbone, items decided) and each rule's paired change ± s.e. per proxy with the proxy's
    judgement (AUC of the rule's energy) in brackets; then each rule's break-even judgement."""
    cells = df[df["rule"].isin(["ind", "inv", "uni", "rerank"])]
    proxies = list(dict.fromkeys(cells["proxy"].dropna()))
    backbones = list(dict.fromkeys(cells["backbone"]))
    blabel = {
        b: f"{cells.loc[cells['backbone'] == b, 'backbone_label'].iloc[0]} "
        f"({num(cells.loc[cells['backbone'] == b, 'backbone_avg'].iloc[0], 1)} %)"
        for b in backbones
    }
    header = ["candidates, w", "rule"] + [f"{blabel[b]}: {p}" for b in backbones for p in proxies]
    body = []
    for (draw, w), sub in cells.groupby(["draw", "w"], sort=False):
        room = [f"{draw}, w = {w:g}", "room"]
        for b in backbones:
            r = sub[sub["backbone"] == b]
            text = (
                "–"
                if r.empty
                else (
                    f"ceiling {r['ceiling'].iloc[0]:+.1f} ± {r['ceiling_se'].iloc[0]:.1f}, floor "
                    f"{r['floor'].iloc[0]:+.1f}, decided {100 * r['decides'].iloc[0]:.0f} %"
                )
            )
            room += [text] + [""] * (len(proxies) - 1)
        body.append(room)
        for rule in dict.fromkeys(sub["rule"]):
            row = ["", rule]
            for b in backbones:
                for p in proxies:
                    hit = sub[
                        (sub["backbone"] == b) & (sub["rule"] == rule) & ((sub["proxy"] == p) | (sub["proxy"] == "any"))
                    ]
                    row.append(
                        "–"
                        if hit.empty
                        else f"{hit['delta'].iloc[0]:+.1f} ± {hit['se'].iloc[0]:.1f} ({num(hit['auc'].iloc[0], 2)})"
                    )
            body.append(row)
    out = md_table(header, body)
    be = df[df["rule"] == "break_even"]
    if not be.empty:
        out += (
            "\n\nBreak-even judgement (AUC) along the continuum: "
            + "; ".join(
                f"{r.backbone_label} {r.label} ({r.draw}, w = {r.w:g}): "
                + ("never" if pd.isna(r.auc) else f"{r.auc:.2f} ± {r.auc_se:.2f}")
                for r in be.itertuples()
            )
            + "."
        )
    return out


def sweep_table(df: pd.DataFrame) -> str:
    """An appendix k or w table: accuracy ± s.e. and throughput per point."""
    body = [
        [plain(r["row"]), f"{num(r['value'])} ± {num(r['stderr'])}", num(r["tokens_per_s"], 0), str(r["nfe"])]
        for r in df.to_dict("records")
    ]
    return md_table(["point", "accuracy (%)", "tokens/s", "forwards"], body)


def fig2_table(df: pd.DataFrame) -> str:
    """Figure 2: Gen PPL at every step count (``a / b / c / d``) per energy and AR context."""
    steps = sorted(df["steps"].unique())
    curves, contexts = list(dict.fromkeys(df["curve"])), list(dict.fromkeys(df["context"]))
    with_se = "nll_se" in df and df["nll_se"].notna().any()
    body = []
    for curve in curves:
        row = [plain(curve)]
        for ctx in contexts:
            sub = df[(df["curve"] == curve) & (df["context"] == ctx)].set_index("steps")["genppl"]
            row.append(" / ".join(num(sub.get(s), 1) for s in steps))
        if with_se:
            se = df.loc[df["curve"] == curve, "nll_se"].dropna()
            row.append(f"{se.min():.3f}–{se.max():.3f}" if len(se) else "–")
        body.append(row)
    rules = ""
    if "selection" in df and df["selection"].notna().any():
        rules = (
            " An energy curve picks its candidate by argmin E (the paper's Algorithm 2) unless its label says "
            "resample (j drawn from softmax(−E), EDLM's own rule)."
        )
    return (
        md_table(
            ["energy", *[c.replace("_", " ") for c in contexts]] + (["s.e. of NLL (nats)"] if with_se else []), body
        )
        + f"\n\nCells are Gen PPL at {' / '.join(map(str, steps))} steps.{rules}"
    )


def fig3_table(df: pd.DataFrame) -> str:
    """Figure 3: every point of the three panels (Gen PPL, NLL ± s.e., entropy, seconds per batch)."""
    body = [
        [
            r["panel"],
            plain(r["curve"]),
            str(r["steps"]),
            num(r["genppl"], 1),
            f"{num(r['nll'], 3)} ± {num(r['nll_se'], 3)}",
            num(r["entropy_bits"], 2),
            num(r["seconds"], 3),
        ]
        for r in df.to_dict("records")
    ]
    return md_table(["panel", "curve", "steps", "Gen PPL", "NLL (nats)", "entropy (bits)", "s per batch"], body)


def fig3_claims(record: dict) -> str:
    """The wall-clock claim of Figure 3 as measured (``fig3_tradeoff.json``)."""
    ar = record.get("ar") or {}
    lines = [f"* AR: Gen PPL {num(ar.get('genppl'), 1)} in {num(ar.get('seconds'), 3)} s per batch."]
    for name, w in (record.get("wallclock") or {}).items():
        if w.get("selection"):
            name = f"{name} ({w['selection']})"
        if w.get("genppl") is None:
            lines.append(f"* {plain(name)}: never reaches the AR's Gen PPL (best {num(w.get('best_genppl'), 1)}).")
        else:
            lines.append(
                f"* {plain(name)}: Gen PPL {num(w['genppl'], 1)} at {w['steps']} steps in "
                f"{num(w['seconds'], 3)} s, {num(w.get('ratio_to_ar'), 2)}× the AR's wall-clock."
            )
    return "\n".join(lines)


def fig4_table(df: pd.DataFrame) -> str:
    """Figure 4: accuracy and throughput of every sweep point."""
    body = [
        [
            plain(r["label"]),
            f"{r['key']} = {r['value']:g}",
            f"{num(r['accuracy'])} ± {num(r['stderr'])}",
            num(r["tokens_per_s"], 0),
            str(r["nfe"]),
        ]
        for r in df.to_dict("records")
    ]
    return md_table(["curve", "point", "accuracy (%)", "tokens/s", "forwards"], body)


def partition_table(df: pd.DataFrame) -> str:
    """The partition check summarised per context and number of revealed tokens |D|."""
    body = []
    for (ctx, revealed), sub in df.groupby(["ar_context", "revealed"], sort=False):
        body.append(
            [
                ctx.replace("_", " "),
                str(revealed),
                f"{sub['fixed_xs_min'].min():.6f}",
                f"{sub['fixed_xs_max'].max():.6f}",
                f"{sub['derived_xs'].min():.4f}–{sub['derived_xs'].max():.4f}",
                str(sub["V_pow_D"].iloc[0]),
            ]
        )
    return md_table(
        ["AR context", "revealed \\|D\\|", "mass, xs fixed (min)", "(max)", "mass over x0, xs derived", "V^\\|D\\|"],
        body,
    )


def timing_table(records: list[dict]) -> str:
    """The machines behind the wall-clock numbers (``results/timing/{run}.json``)."""
    body = [
        [
            r["run"],
            r.get("device_name", r.get("device", "?")),
            str(r.get("threads", "?")),
            r.get("torch", "?"),
            " / ".join(f"{p['steps']}: {p['seconds']:.3f}" for p in r.get("points", [])),
        ]
        for r in records
    ]
    return md_table(["run", "device", "threads", "torch", "steps: median s per batch"], body)


def demote_headings(md: str, levels: int = 1) -> str:
    """An included Markdown page (``paper_vs_ours.md``) with its headings one level lower."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", md, flags=re.M)


def results_page(sections: list[tuple[str, str]], preamble: str = "") -> str:
    """The whole page: a title, a preamble and one ``##`` section per (title, Markdown body)."""
    parts = ["# Results of the last run (generated)", preamble.strip()]
    parts += [f"## {title}\n\n{body.strip()}" for title, body in sections]
    return "\n\n".join(p for p in parts if p) + "\n"


def frame_table(df: pd.DataFrame, digits: int = 3) -> str:
    """Any table as it is (a CSV that no renderer above knows yet)."""

    def cell(x):
        return num(x, digits) if isinstance(x, float) else plain(x)

    return md_table([plain(c) for c in df.columns], [[cell(x) for x in row] for row in df.itertuples(index=False)])


# (file stem, section title, what it is, renderer); the order of the page
SECTIONS = [
    (
        "table1_ppl",
        "Table 1: perplexity on the test split of 8 domains",
        "Lower is better. A bound for the diffusion rows, exact for the AR and π, estimates for the energy rows.",
        table1,
    ),
    (
        "partition_check",
        "The partition check (vocabulary 3, length 4)",
        "The closed-form partition's mass with `xs` held fixed, and as a distribution over `x0` given `xt`.",
        partition_table,
    ),
    *[
        (
            "table2_genppl",
            f"Table 2: generative perplexity under `{ev}`",
            "Gen PPL per step count.",
            lambda df, ev=ev: table2(df, ev),
        )
        for ev in ("exact", "ar_long", "ar")
    ],
    ("fig2_ablation", "Figure 2: energy ablation", "Gen PPL under π per energy and AR context.", fig2_table),
    ("fig3_tradeoff", "Figure 3: candidates, window and wall-clock", "Every point of the figure.", fig3_table),
    ("fig3_tradeoff.json", "Figure 3: the wall-clock claim", "Equal-quality wall-clock against the AR.", fig3_claims),
    (
        "table3_dllm",
        "Table 3: DLLM benchmarks (accuracy, %)",
        "In brackets: the delta to the row's backbone ± its paired standard error.",
        dllm_table,
    ),
    ("table_app_dllm_full", "Appendix: the full DLLM table", "Table 3's rows and the appendix-only ones.", dllm_table),
    (
        "table_app_selection",
        "Appendix: Algorithm 3's selection rules (beyond the paper)",
        "Per backbone and energy: argmin (the paper), resample, proxy_rerank; Δ is the paired change from the backbone.",
        selection_md,
    ),
    ("fig4_dllm_tradeoff", "Figure 4: accuracy against throughput (MATH500 analogue)", "", fig4_table),
    ("table_app_k", "Appendix: candidates k", "", sweep_table),
    ("table_app_w", "Appendix: window w", "", sweep_table),
    (
        "table_app_map",
        "Beyond the paper: when does Uni-E help a DLLM?",
        "The paired change of the average accuracy against the backbone ± s.e., per selection rule and candidate draw "
        "(temperature τ; greedy first: candidate 0 is the backbone's greedy x̂0), as the proxy goes from weak to an "
        "oracle (target `table_app_map`, not in `all`; the first 100 items of MATH, GSM8K, MBPP and MMLU). Inv-E reads "
        "no proxy (one value under every proxy); APD draws its own drafts.",
        map_md,
    ),
]


def page_from_results(results: dict, timing: list[dict] | None = None, note: str = "") -> str:
    """The page from loaded result files: ``results`` maps a file's stem (``table1_ppl``; ``fig3_tradeoff.json``
    for a JSON, ``paper_vs_ours.md`` for a Markdown page) to its DataFrame, parsed JSON or text.  Known files get
    their section in :data:`SECTIONS` order, any other CSV a plain table after them; missing files are left out."""
    sections, known = [], {"paper_vs_ours"}  # its Markdown page is included instead of its CSV
    for key, title, what, render in SECTIONS:
        known.add(key)
        if key in results:
            sections.append((title, f"{what}\n\n{render(results[key])}".strip()))
    for key, value in results.items():
        if key not in known and isinstance(value, pd.DataFrame):
            sections.append((f"`{key}`", frame_table(value)))
    if "paper_vs_ours.md" in results:
        sections.append(("The paper beside ours", demote_headings(results["paper_vs_ours.md"], 2)))
    if timing:
        sections.append(("Where the wall-clock numbers were measured", timing_table(timing)))
    preamble = (
        "Generated by the rule `docs` (`snakemake --cores 2 docs`) from the CSV and JSON files "
        "under the run's `results/` (the run below); do not edit it by hand. What the numbers show is in [findings.md](findings.md)."
        + (f"\n\n{note}" if note else "")
    )
    return results_page(sections, preamble)
