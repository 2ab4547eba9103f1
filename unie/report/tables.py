"""LaTeX and CSV tables with the row/column structure of the paper's Tables 1 and 2.

Each function takes the result records written by the workflow's rules (parsed JSON; they carry their
own identity: ``source`` for Table 1, ``sampling.run``/``sampling.steps`` for Table 2) and returns the
LaTeX text and the long-format ``DataFrame`` of every cell; nothing is typed in and nothing is read
from a file name.  A missing value is printed as "--" (as the paper does for methods without a
likelihood).  Writing the files is the pipeline's job (:mod:`unie.pipeline.report`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

DOMAIN_LABELS = {"owt": "OWT", "ptb": "PTB", "wikitext": "WikiText", "lm1b": "LM1B", "lambada": "Lambada",
                 "ag_news": "AG News", "pubmed": "Pubmed", "arxiv": "Arxiv"}
DASH = "--"


def _fmt(v, nd=2) -> str:
    return DASH if v is None or v != v else f"{v:.{nd}f}"


def table1(rows: dict, domains: list[str], records: list[dict]) -> tuple[str, pd.DataFrame]:
    """Perplexity per domain.  ``rows``: label -> source (model name, likelihood entry or ``exact``);
    ``records``: the ``results/ppl/*.json`` results (each with its ``source``)."""
    results = {r["source"]: r for r in records}
    records = []
    for label, src in rows.items():
        res = results.get(src) if src else None
        for d in domains:
            cell = (res or {}).get("domains", {}).get(d) if res else None
            records.append({"row": label, "source": src, "domain": d,
                            "ppl": cell["ppl"] if cell else None,
                            "nll_per_token": cell["nll_per_token"] if cell else None,
                            "nll_se": cell["nll_se"] if cell else None,
                            "n_mc": (res or {}).get("n_mc")})
    df = pd.DataFrame.from_records(records)
    head = " & ".join(["Methods"] + [DOMAIN_LABELS.get(d, d) for d in domains])
    spec = "l|c" + ("|" + "c" * (len(domains) - 1) if len(domains) > 1 else "")
    lines = [r"\begin{tabular}{" + spec + "}",
             r"\toprule", head + r" \\", r"\midrule"]
    for label in rows:
        sub = df[df.row == label].set_index("domain")
        lines.append(" & ".join([label] + [_fmt(sub.loc[d, "ppl"]) for d in domains]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines), df


def table2(rows: dict, runs: dict, evaluators: dict, records: list[dict],
           entropy_rate: float | None = None) -> tuple[str, pd.DataFrame]:
    """Gen PPL per step count and evaluator, and entropy (bits).  ``rows``: label -> sampling run.

    With an ``exact`` evaluator and ``entropy_rate`` (pi's entropy per token, nats), the column
    ``excess_nll`` is ``E_q[-log pi(x)]/L - H_pi/L``: the samples' NLL under pi in excess of pi's own
    entropy rate, in nats per token.  It is **not** ``KL(q || pi)``: that is ``E_q[-log pi] - H(q)``, and
    ``excess_nll = KL(q || pi)/L + (H(q) - H_pi)/L`` can be negative for a low-entropy sampler (it rewards
    collapse).  It orders samplers by the exact cross-entropy, like the ``pi`` Gen PPL column."""
    exact = next((e for e, spec in evaluators.items() if spec["kind"] == "exact"), None)
    results = {(r["sampling"]["run"], int(r["sampling"]["steps"])): r for r in records}
    records = []
    for label, run in rows.items():
        for (r, steps), res in sorted(results.items()):
            if r != run:
                continue
            samp = res.get("sampling", {})
            excess = None
            if exact is not None and entropy_rate is not None:
                excess = res["genppl"][exact]["nll_per_token"] - entropy_rate
            for ev in evaluators:
                g = res["genppl"].get(ev)
                records.append({"row": label, "run": run, "sampler": runs[run]["sampler"], "steps": steps,
                                "evaluator": ev, "genppl": g["ppl"] if g else None,
                                "nll_per_token": g["nll_per_token"] if g else None,
                                "nll_se": g["nll_se"] if g else None, "entropy_bits": res["entropy_bits"],
                                "excess_nll": excess, "seconds": samp.get("seconds"), "nfe": samp.get("nfe"),
                                "options": json.dumps(samp.get("options", {}), sort_keys=True)})
    df = pd.DataFrame.from_records(records)
    ev_names = list(evaluators)
    with_excess = len(df) > 0 and df.excess_nll.notna().any()
    head = ["Method", "Timesteps"] + [evaluators[e]["label"] + r"$\downarrow$" for e in ev_names]
    head += ([r"Excess NLL$_\pi$$\downarrow$"] if with_excess else []) + ["Entropy"]
    spec = "l|c|" + "c" * len(ev_names) + ("|c" if with_excess else "") + "|c"
    lines = [r"\begin{tabular}{" + spec + "}", r"\toprule", " & ".join(head) + r" \\", r"\midrule"]
    for label, run in rows.items():
        sub = df[df.row == label] if len(df) else df
        steps = sorted(sub.steps.unique()) if len(sub) else []
        if runs[run]["sampler"] == "data":
            ts = DASH
        else:
            ts = " / ".join(str(s) for s in steps) or DASH
        cells = []
        for e in ev_names:
            vals = [sub[(sub.steps == s) & (sub.evaluator == e)].genppl for s in steps]
            cells.append(" / ".join(_fmt(v.iloc[0], 1) if len(v) else DASH for v in vals) or DASH)
        if with_excess:
            cells.append(" / ".join(_fmt(sub[sub.steps == s].excess_nll.iloc[0], 3) for s in steps) or DASH)
        ent = " / ".join(_fmt(sub[sub.steps == s].entropy_bits.iloc[0], 2) for s in steps) or DASH
        lines.append(" & ".join([label, ts] + cells + [ent]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines), df


def partition_table(df: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The brute-force partition check (:func:`unie.energy.partition.check_partition` records) per AR context
    and number of revealed tokens: the mass with ``xs`` fixed and with ``xs`` derived from ``x0``."""
    summary = df.groupby(["ar_context", "revealed"]).agg(
        fixed_xs=("fixed_xs_max", "max"), derived_xs=("derived_xs", "mean"), V_pow_D=("V_pow_D", "first")).reset_index()
    lines = [r"\begin{tabular}{l|c|c|c|c}", r"\toprule",
             r"AR context & $|D|$ & mass, $x_s$ fixed & mass, $x_s$ from $x_0$ & $3^{|D|}$ \\", r"\midrule"]
    for r in summary.itertuples():
        lines.append(f"{r.ar_context.replace('_', ' ')} & {r.revealed} & {r.fixed_xs:.6f} & {r.derived_xs:.6f} & "
                     f"{r.V_pow_D} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines), summary


def paired_delta_se(scores: dict, base: dict) -> float:
    """Standard error (in the scores' unit) of ``mean(scores - base)`` over the items both score
    (``{doc_id: score}``): ``sd(d) / sqrt(n)`` with the sample standard deviation of the per-item differences ``d``.
    The rows decode the same items, so this is the s.e. of an energy row's delta to its backbone; it is far
    smaller than either accuracy's own s.e. when the two rows agree on most items.  NaN for fewer than 2 items."""
    ids = sorted(set(scores) & set(base))
    if len(ids) < 2:
        return float("nan")
    d = np.array([scores[i] - base[i] for i in ids], dtype=float)
    return float(d.std(ddof=1) / np.sqrt(len(d)))


def table3(rows: dict, tasks: list[str], results: dict, metrics: dict, columns: dict,
           samples: dict | None = None) -> tuple[str, pd.DataFrame]:
    """Table 3: accuracy (%) per benchmark, the paper's column order, one row per Table 3 row.

    ``rows``: row name -> ``{label, delta_to?}`` (config ``dllm.rows``); ``results``: row name -> lm-eval's
    results JSON (parsed); ``metrics``: task -> lm-eval's result key ``<metric>,<filter>`` (``acc,none``,
    ``exact_match,flexible-extract``); ``columns``: task -> the paper's column name.  A cell is that value x 100; an energy row
    shows its delta to its backbone (``delta_to``) in green (gain) or red (loss), as the paper does; a row's
    ``note`` (e.g. "our reading") marks its label with a dagger and is printed under the table; the CSV
    holds lm-eval's standard error and, where ``samples`` (row -> task -> ``{doc_id: score}``, lm-eval's
    ``--log_samples``) has both rows, the paired standard error of the delta (:func:`paired_delta_se`, x 100)."""
    records = []
    for name, row in rows.items():
        res = results[name]["results"]
        for task in tasks:
            m = metrics[task]
            metric, filt = m.split(",", 1)
            r = res[task]
            se = r.get(f"{metric}_stderr,{filt}")
            records.append({"row": name, "label": row["label"], "task": task, "column": columns[task],
                            "metric": m, "value": 100 * float(r[m]),
                            "stderr": 100 * float(se) if isinstance(se, (int, float)) else None,
                            "n": results[name]["n-samples"][task]["effective"]})
    df = pd.DataFrame.from_records(records)
    avg = df.groupby("row", sort=False)["value"].mean()
    for name, row in rows.items():
        base = row.get("delta_to")
        if base:
            cur = df.loc[df.row == name, "value"].to_numpy()
            ref = df.loc[df.row == base, "value"].to_numpy()
            df.loc[df.row == name, "delta"] = cur - ref
            if samples is not None:
                for t in tasks:
                    a, b = samples.get(name, {}).get(t), samples.get(base, {}).get(t)
                    se = 100 * paired_delta_se(a, b) if a and b else float("nan")
                    df.loc[(df.row == name) & (df.task == t), "delta_se"] = se
    notes = list(dict.fromkeys(row["note"] for row in rows.values() if row.get("note")))  # one mark per text
    marks = {n: (rf"$^{{\dagger{i}}}$" if len(notes) > 1 else r"$^{\dagger}$") for i, n in enumerate(notes, 1)}
    head = " & ".join(["Methods"] + [columns[t] for t in tasks] + ["Avg."])
    lines = [r"\begin{tabular}{l" + "c" * (len(tasks) + 1) + "}", r"\toprule", head + r" \\", r"\midrule"]
    for name, row in rows.items():
        cells = []
        sub = df[df.row == name].set_index("task")
        for t in tasks:
            v = sub.loc[t, "value"]
            cell = f"{v:.1f}"
            if row.get("delta_to"):
                d = sub.loc[t, "delta"]
                colour = "green!50!black" if d > 0 else ("red" if d < 0 else "black")
                cell += rf" \textcolor{{{colour}}}{{({d:+.1f})}}"
            cells.append(cell)
        a = avg[name]
        if row.get("delta_to"):
            d = a - avg[row["delta_to"]]
            colour = "green!50!black" if d > 0 else ("red" if d < 0 else "black")
            cells.append(f"{a:.1f}" + rf" \textcolor{{{colour}}}{{({d:+.1f})}}")
        else:
            cells.append(f"{a:.1f}")
        label = row["label"].replace("%", r"\%")
        if row.get("note"):
            label += marks[row["note"]]
        lines.append(" & ".join([label] + cells) + r" \\")
    lines.append(r"\bottomrule")
    for note, mark in marks.items():  # the rows' notes, as the table's caption would carry them
        text = f"{mark} {note}".replace("%", r"\%").replace("_", r"\_")
        lines.append(rf"\multicolumn{{{len(tasks) + 2}}}{{p{{0.9\linewidth}}}}{{\footnotesize {text}}} \\")
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n", df


def sweep_table(sweep: dict, caption: str) -> tuple[str, pd.DataFrame]:
    """An appendix k/w table: one row per value of the varied option (``points.json`` of rule ``dllm_sweep``):
    accuracy (± its s.e. from lm-eval) and throughput.  The CSV is long like Table 3's (``row`` = ``k=2``, the
    paper's row name; ``column`` = ``Accuracy``; ``value``), with the throughput in ``tokens_per_s``."""
    pts = pd.DataFrame(sweep["points"])
    key = pts.key.iloc[0]
    df = pd.DataFrame({"row": [f"{key.lower()}={v}" for v in pts.value], "column": "Accuracy",
                       "value": pts.accuracy, "stderr": pts.stderr, "n": pts.n, "tokens_per_s": pts.tokens_per_s,
                       "nfe": pts.nfe, "curve": pts.curve, "label": pts.label, "option": key, "option_value": pts.value})
    caption = caption.replace("_", "\\_")
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{caption}}}", "\\begin{tabular}{lrr}", "\\toprule",
             f"${key}$ & {sweep['task'].replace('_', chr(92) + '_')} accuracy (\\%) & tokens/s \\\\", "\\midrule"]
    for r in df.itertuples():
        lines.append(f"{r.option_value} & {r.value:.1f} $\\pm$ {r.stderr:.1f} & {r.tokens_per_s:.0f} \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines) + "\n", df
