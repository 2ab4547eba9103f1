r"""LaTeX and CSV tables with the row/column structure of the paper's tables.

Each function takes the result records written by the workflow's rules (parsed JSON; they carry their
own identity: ``source`` for Table 1, ``sampling.run``/``sampling.steps`` for Table 2) and returns the
LaTeX text and the long-format ``DataFrame`` of every cell; nothing is typed in and nothing is read
from a file name.  A missing value is printed as "--" (as the paper does for methods without a
likelihood).  Writing the files is the pipeline's job (:mod:`unie.pipeline.tables_figures`).

Every ``.tex`` is one ``table`` float (or several, for the paper-vs-ours comparison) built with pandas'
``Styler.to_latex``: booktabs rules, ``\midrule`` between row groups, the best value of a column in bold
(as the paper does), ``± s.e.`` where the results carry one, a caption saying what the cells are, and the
tabular inside ``adjustbox`` (``max width=\linewidth``: shrunk only when wider than the text).  The first
line of each file names the LaTeX packages it needs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from ..eval.room import room_reading


DOMAIN_LABELS = {
    "owt": "OWT",
    "ptb": "PTB",
    "wikitext": "WikiText",
    "lm1b": "LM1B",
    "lambada": "Lambada",
    "ag_news": "AG News",
    "pubmed": "Pubmed",
    "arxiv": "Arxiv",
}
DASH = "--"


def _fmt(v, nd=2) -> str:
    return DASH if v is None or v != v else f"{v:.{nd}f}"


def _pm(v, se, nd=2) -> str:
    """``v ± se`` (the s.e. in script size), or ``v`` alone when there is no s.e., "--" when no value."""
    if v is None or v != v:
        return DASH
    if se is None or se != se:
        return f"{v:.{nd}f}"
    return rf"{v:.{nd}f}{{\scriptsize $\pm${se:.{nd}f}}}"


def _missing(v) -> bool:
    return v is None or v != v


def best_mask(values: pd.DataFrame, lower: bool, keep: list[bool] | None = None) -> np.ndarray:
    """Per column, True at the best value (every tied one) among the rows ``keep`` (all rows by default)."""
    vals = values.astype(float).to_numpy()
    keep = np.ones(len(vals), bool) if keep is None else np.asarray(keep, bool)
    out = np.zeros(vals.shape, bool)
    for j in range(vals.shape[1]):
        col = np.where(keep, vals[:, j], np.nan)
        if np.isnan(col).all():
            continue
        best = np.nanmin(col) if lower else np.nanmax(col)
        out[:, j] = keep & np.isclose(vals[:, j], best, rtol=0, atol=1e-12)
    return out


def latex_float(
    cells: pd.DataFrame,
    *,
    caption: str,
    label: str,
    bold: np.ndarray | None = None,
    groups: list | None = None,
    column_format: str | None = None,
    size: str = "small",
    packages: tuple[str, ...] = ("booktabs", "adjustbox"),
) -> str:
    """One ``table`` float from a frame of LaTeX cell strings (its columns are the header) with
    ``Styler.to_latex``: booktabs rules, ``bold`` cells in ``\\textbf``, a ``\\midrule`` wherever ``groups`` (one
    key per row) changes, the tabular in ``adjustbox`` so that it never exceeds the text width.  The first line
    names the packages."""
    sty = cells.style.hide(axis="index")
    if bold is not None:
        sty = sty.apply(lambda _: np.where(bold, "textbf:--rwrap;", ""), axis=None)
    sty = sty.set_table_styles([{"selector": size, "props": ":;"}], overwrite=False)
    fmt = column_format or "l" + "c" * (cells.shape[1] - 1)
    tex = sty.to_latex(
        column_format=fmt,
        hrules=True,
        environment="table",
        position="t",
        position_float="centering",
        caption=caption,
        label=label,
    )
    lines = tex.splitlines()
    start = lines.index(r"\midrule")  # the header's rule: one data row per line after it
    if groups is not None:
        for i in range(len(groups) - 1, 0, -1):
            if groups[i] != groups[i - 1]:
                lines.insert(start + 1 + i, r"\midrule")
    lines = _boxed(lines)
    return f"% LaTeX packages: {', '.join(packages)}\n" + "\n".join(lines) + "\n"


def _boxed(lines: list[str]) -> list[str]:
    """Wrap every tabular in ``adjustbox`` (``max width=\\linewidth``): a wide table is shrunk, a narrow one kept."""
    out = []
    for line in lines:
        if line.startswith(r"\begin{tabular}"):
            out.append(r"\begin{adjustbox}{max width=\linewidth}")
        out.append(line)
        if line == r"\end{tabular}":
            out.append(r"\end{adjustbox}")
    return out


def row_group(label: str) -> int:
    """The paper's row groups of Tables 1 and 2 (a ``\\midrule`` between them): 0 the references (data, AR),
    1 diffusion baselines, 2 dependency-aware / remasking baselines, 3 Uni-E."""
    if label.startswith("Data") or label == "AR" or label.startswith("AR "):
        return 0
    if label.startswith("Uni-"):
        return 3
    if label.startswith(("EDLM", "DCD", "ReMDM")):
        return 2
    return 1


def table1(rows: dict, domains: list[str], records: list[dict]) -> tuple[str, pd.DataFrame]:
    """Perplexity per domain.  ``rows``: label -> source (model name, likelihood entry or ``exact``);
    ``records``: the ``results/ppl/*.json`` results (each with its ``source``).

    A row whose estimator is not an upper bound on perplexity (an energy row whose ``spec`` says so:
    :func:`unie.energy.names.estimator_is_bound`) gets a dagger and a caption note and is never bold: the best
    of a column is chosen among the bounds (the reference rows, data and AR, left out).  The CSV says it per cell:
    ``bound`` (the row's estimator is a bound) and ``best`` (the cell is bold)."""
    from ..energy.names import estimator_is_bound, estimator_is_reference

    results = {r["source"]: r for r in records}
    bound, why, reference = {}, {}, {}
    for label, src in rows.items():
        spec = (results.get(src) or {}).get("spec") if src else None
        reference[label] = bool(spec and estimator_is_reference(spec.get("energy"), spec.get("ar_context")))
        if spec and spec.get("energy"):
            bound[label], why[label] = estimator_is_bound(spec["energy"], spec.get("ar_context"))
        else:  # a model's NELBO (a bound), the AR's or pi's exact likelihood; None: no likelihood at all (DCD)
            bound[label] = True if src else None
    records = []
    for label, src in rows.items():
        res = results.get(src) if src else None
        for d in domains:
            cell = (res or {}).get("domains", {}).get(d) if res else None
            records.append(
                {
                    "row": label,
                    "source": src,
                    "domain": d,
                    "ppl": cell["ppl"] if cell else None,
                    "nll_per_token": cell["nll_per_token"] if cell else None,
                    "nll_se": cell["nll_se"] if cell else None,
                    "n_mc": (res or {}).get("n_mc"),
                }
            )
    df = pd.DataFrame.from_records(records)
    names = [DOMAIN_LABELS.get(d, d) for d in domains]
    labels = [
        label + r"$^\dagger$" if bound[label] is False else label + r"$^\S$" if reference[label] else label
        for label in rows
    ]
    cells, vals = {"Methods": labels}, {}
    for d, name in zip(domains, names):
        sub = df[df.domain == d].set_index("row")
        ppl = [sub.loc[label, "ppl"] for label in rows]
        # s.e. of the perplexity by the delta method: exp(nll) * s.e.(nll)
        se = [
            None if _missing(p) or _missing(sub.loc[label, "nll_se"]) else p * sub.loc[label, "nll_se"]
            for p, label in zip(ppl, rows)
        ]
        cells[name] = [_pm(p, e) for p, e in zip(ppl, se)]
        vals[name] = [np.nan if _missing(p) else p for p in ppl]
    groups = [row_group(label) for label in rows]
    keep = [g != 0 and bound[label] is True and not reference[label] for g, label in zip(groups, rows)]
    best = best_mask(pd.DataFrame(vals), lower=True, keep=keep)
    bold = np.column_stack([np.zeros(len(rows), bool), best])
    df["bound"] = [bound[r] for r in df.row]
    df["reference_estimator"] = [reference[r] for r in df.row]
    df["best"] = [bool(best[list(rows).index(r), domains.index(d)]) for r, d in zip(df.row, df.domain)]
    caption = (
        r"Perplexity per domain (lower is better; an upper bound for the diffusion models, exact for the AR "
        r"model and for the data distribution $\pi$), $\pm$ its standard error ($\exp(\mathrm{NLL})$ times "
        r"the s.e. of the per-token NLL). The best value of each column among the bounds is in \textbf{bold} "
        r"(the reference rows, data and AR, left out); -- means no likelihood."
    )
    daggers = [label for label in rows if bound[label] is False]
    if daggers:
        reasons = "; ".join(dict.fromkeys(why[label] for label in daggers))
        caption += (
            r" $^\dagger$ Not an upper bound on perplexity, so never bold: its value can fall below the "
            r"data's own perplexity (" + reasons.replace("_", r"\_") + ")."
        )
    if any(reference.values()):
        caption += (
            r" $^\S$ Its estimator is in expectation the AR proxy's own NLL ("
            + ", ".join(label for label in rows if reference[label])
            + r"), the AR reference row's likelihood, so it is left out of the bold like that row."
        )
    return latex_float(pd.DataFrame(cells), caption=caption, label="tab:ppl", bold=bold, groups=groups), df


def table2(
    rows: dict, runs: dict, evaluators: dict, records: list[dict], entropy_rate: float | None = None
) -> tuple[str, pd.DataFrame]:
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
                records.append(
                    {
                        "row": label,
                        "run": run,
                        "sampler": runs[run]["sampler"],
                        "steps": steps,
                        "evaluator": ev,
                        "genppl": g["ppl"] if g else None,
                        "nll_per_token": g["nll_per_token"] if g else None,
                        "nll_se": g["nll_se"] if g else None,
                        "entropy_bits": res["entropy_bits"],
                        "excess_nll": excess,
                        "seconds": samp.get("seconds"),
                        "nfe": samp.get("nfe"),
                        "options": json.dumps(samp.get("options", {}), sort_keys=True),
                        "selection": (samp.get("options") or {}).get("selection"),
                    }
                )
    df = pd.DataFrame.from_records(records)
    ev_names = list(evaluators)
    with_excess = len(df) > 0 and df.excess_nll.notna().any()
    head = [evaluators[e]["label"] + r"$\downarrow$" for e in ev_names]
    cols = ["Method", "Steps"] + head + ([r"Excess NLL$_\pi\downarrow$"] if with_excess else []) + ["Entropy"]
    cells, vals, keep, groups, block, own, where = [], [], [], [], [], [], []
    for label, run in rows.items():
        sub = df[df.row == label] if len(df) else df
        steps = sorted(sub.steps.unique()) if len(sub) else [None]
        rule = selection_label(sub)
        uses = set((runs[run].get("models") or {}).values())  # the networks this row's sampler decodes with
        for i, s in enumerate(steps):
            at = sub[sub.steps == s] if s is not None else sub
            ts = DASH if runs[run]["sampler"] == "data" or s is None else str(s)
            row, val = [(label + (rf" {{\scriptsize ({rule})}}" if rule else "")) if i == 0 else "", ts], []
            mine = []
            for e in ev_names:
                g = at[at.evaluator == e]
                v = g.genppl.iloc[0] if len(g) else None
                # s.e. of the Gen PPL by the delta method: exp(nll) * s.e.(nll)
                se = None if _missing(v) or _missing(g.nll_se.iloc[0]) else v * g.nll_se.iloc[0]
                # an evaluator that is one of the sampler's own networks judges its own choices: never bold there
                judged_by_self = evaluators[e].get("kind") == "model" and evaluators[e].get("model") in uses
                row.append(_pm(v, se, 1) + (r"$^\ddagger$" if judged_by_self and not _missing(v) else ""))
                val.append(np.nan if _missing(v) else v)
                mine.append(judged_by_self)
            if with_excess:
                ex = at.excess_nll.iloc[0] if len(at) else None
                g = at[at.evaluator == exact] if exact is not None else at.iloc[:0]
                row.append(_pm(ex, g.nll_se.iloc[0] if len(g) else None, 3))
                val.append(np.nan if _missing(ex) else ex)
            row.append(_fmt(at.entropy_bits.iloc[0], 2) if len(at) else DASH)
            cells.append(row)
            vals.append(val)
            keep.append(row_group(label) != 0)
            groups.append(row_group(label))
            block.append(label)
            own.append(mine + [False] * (len(val) - len(mine)))
            where.append((label, s))
    table = pd.DataFrame(cells, columns=cols)
    # the best of each column among the rows with the same step count (the references, data and AR, left out, and in
    # an evaluator's column the rows whose sampler decodes with that evaluator's network)
    values = pd.DataFrame(vals, dtype=float)
    own = np.array(own, bool).reshape(len(vals), values.shape[1])
    bold = np.zeros(table.shape, bool)
    for s in set(table.Steps):
        at = (table.Steps == s).to_numpy()
        for j in range(values.shape[1]):
            bold[:, 2 + j] |= best_mask(values.iloc[:, [j]], lower=True, keep=np.array(keep) & at & ~own[:, j])[:, 0]
    # the CSV says which cells are bold (per row, steps and evaluator), as Table 1's does
    best = {(lab, st, e): bool(bold[i, 2 + j]) for i, (lab, st) in enumerate(where) for j, e in enumerate(ev_names)}
    if len(df):
        df["best"] = [best.get((r.row, r.steps, r.evaluator), False) for r in df.itertuples()]
    judged = sorted({lab for i, (lab, _) in enumerate(where) if own[i].any()}, key=list(rows).index)
    caption = (
        r"Generative perplexity per number of sampling steps, under each evaluator "
        r"($\downarrow$: lower is better), $\pm$ its standard error ($\exp(\mathrm{NLL})$ times the s.e. of "
        r"the per-token NLL)"
        + (
            r"; excess NLL$_\pi$: the samples' NLL per token under $\pi$ minus $\pi$'s entropy rate (nats, "
            r"$\pm$ s.e.)"
            if with_excess
            else ""
        )
        + r"; entropy: per-sample unigram entropy in bits. The best value of a column among the rows with the "
        r"same number of steps is in \textbf{bold} (data and AR left out)."
        + (
            (
                r" $^\ddagger$ Judged by one of the networks its sampler decodes with ("
                + ", ".join(judged)
                + r"), so never bold in that column."
            )
            if judged
            else ""
        )
        + (
            r" An energy row names its candidate selection rule: argmin, the paper's Algorithm 2 ($j^* = "
            r"\arg\min_j E^j$); resample, EDLM's own sampler ($j^* \sim \mathrm{softmax}(-E/\tau)$, "
            r"self-normalised importance resampling)."
            if len(df) and df.selection.notna().any()
            else ""
        )
    )
    return latex_float(table, caption=caption, label="tab:genppl", bold=bold, groups=block), df


def selection_label(records: pd.DataFrame, latex: bool = True) -> str | None:
    """The candidate selection rule of one Table 2 row (``argmin``, ``resample``, with its temperature when not 1),
    read from its results' sampling options (the CSV's ``selection`` and ``options`` columns); ``None`` for a
    sampler without one.  Every step count of a row must agree.  ``latex``: the temperature as ``$\\tau$``."""
    if "selection" not in records or not records.selection.notna().any():
        return None
    rules = set()
    for opts, sel in zip(records.options, records.selection):
        if sel is None or sel != sel:
            continue
        tau = json.loads(opts).get("temperature", 1.0) if opts else 1.0
        tau_name = r"$\tau$" if latex else "τ"
        rules.add(sel if sel == "argmin" or tau in (None, 1, 1.0) else f"{sel}, {tau_name}={tau:g}")
    if len(rules) > 1:
        raise ValueError(
            f"row {records.row.iloc[0]!r}: step counts drawn with different selection rules {sorted(rules)}"
        )
    return rules.pop()


def partition_table(df: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The brute-force partition check (:func:`unie.energy.partition.check_partition` records) per AR context
    and number of revealed tokens: the mass with ``xs`` fixed and with ``xs`` derived from ``x0``."""
    summary = (
        df.groupby(["ar_context", "revealed"])
        .agg(fixed_xs=("fixed_xs_max", "max"), derived_xs=("derived_xs", "mean"), V_pow_D=("V_pow_D", "first"))
        .reset_index()
    )
    cells = pd.DataFrame(
        {
            "AR context": [c.replace("_", " ") for c in summary.ar_context],
            "$|D|$": summary.revealed.astype(str),
            "mass, $x_s$ fixed": [f"{v:.6f}" for v in summary.fixed_xs],
            "mass, $x_s$ from $x_0$": [f"{v:.6f}" for v in summary.derived_xs],
            "$3^{|D|}$": summary.V_pow_D.astype(str),
        }
    )
    caption = (
        r"The Uni-E partition function enumerated on a toy vocabulary ($V=3$, $L=4$) per AR context and number "
        r"$|D|$ of revealed tokens: the total mass with $x_s$ fixed (1 when the closed form is exact) and with "
        r"$x_s$ derived from $x_0$ (mean over contexts; $3^{|D|}$ expected)."
    )
    return latex_float(cells, caption=caption, label="tab:partition", groups=list(summary.ar_context)), summary


LOGLIK_OUTPUT_TYPES = ("multiple_choice", "loglikelihood")  # lm-eval's output types scored by log-likelihood
LOGLIK_NOTE = "n/a — log-likelihood"  # the change of a log-likelihood column: no decoder can move it


def loglikelihood_tasks(results: dict, tasks: list[str]) -> set[str]:
    """The ``tasks`` scored by log-likelihood, hence decoder-independent: their lm-eval ``output_type`` (from the
    results JSONs' ``configs``; a group such as ``mmlu`` through its leaf subtasks in ``group_subtasks``) is
    ``multiple_choice`` or ``loglikelihood`` in every leaf.  ``results``: row name -> parsed results JSON; a task
    no JSON describes counts as generative."""
    out = set()
    for task in tasks:
        for res in results.values():
            groups, configs = res.get("group_subtasks", {}), res.get("configs", {})

            def leaves(t):
                return [leaf for sub in groups[t] for leaf in leaves(sub)] if groups.get(t) else [t]

            kinds = [configs[leaf].get("output_type") for leaf in leaves(task) if leaf in configs]
            if kinds:
                if all(k in LOGLIK_OUTPUT_TYPES for k in kinds):
                    out.add(task)
                break
    return out


def table3(
    rows: dict,
    tasks: list[str],
    results: dict,
    metrics: dict,
    columns: dict,
    effects: dict | None = None,
    rooms: dict | None = None,
    average: list[str] | None = None,
) -> tuple[str, pd.DataFrame]:
    """Table 3: accuracy (%) per benchmark, the paper's column order, one row per Table 3 row.

    ``rows``: row name -> ``{label, delta_to?}`` (config ``dllm.rows``); ``results``: row name -> lm-eval's
    results JSON (parsed); ``metrics``: task -> lm-eval's result key ``<metric>,<filter>`` (``acc,none``,
    ``exact_match,flexible-extract``); ``columns``: task -> the paper's column name.  A cell is that value x 100; an energy row
    shows its delta to its backbone (``delta_to``) in green (gain) or red (loss), as the paper does; a row's
    ``note`` (e.g. "our reading") marks its label with a dagger and is printed under the table; the CSV
    holds lm-eval's standard error.  ``effects`` (decoder row -> its ``effect.json``,
    :func:`unie.eval.metrics.paired_effect` over lm-eval's ``--log_samples``): the CSV gains each row's paired
    standard error of the delta per task (``delta_se``, NaN where the effect has none), its share of changed
    completions per task and, for Algorithm 3, of disagreeing window iterations; the caption one sentence per energy
    row (:func:`effect_note`).

    A task scored by log-likelihood (:func:`loglikelihood_tasks`: lm-eval's built-in ``mmlu``, ``hellaswag``) is
    *decoder-independent*: a decoder row's change there is :data:`LOGLIK_NOTE` instead of a number (exactly 0 for
    a deterministic decoder, Monte-Carlo noise otherwise), the CSV's ``decoder_independent`` is true and its
    ``delta`` empty, and the change of ``Avg.`` is the mean change over the other columns (``Avg.`` itself is over
    all columns, as the paper's).

    ``rooms`` (backbone row -> its room record, rule ``dllm_room_{backbone}``, :mod:`unie.eval.room`): after each
    backbone's rows, its window's room: the change the best and the worst selection among the window's candidates
    reach against the backbone (ceiling / floor) per column and on the average, and the share of items in which a
    choice inside the window changes the score (decided); the CSV gains the rows ``{backbone}__ceiling`` and
    ``{backbone}__floor`` (``value``: the accuracy they reach, ``delta`` ± ``delta_se``: their paired change,
    ``decides``) and, on each Algorithm 3 row, its change as a share of the ceiling's (``share`` ± ``share_se``).

    ``average``: the columns of Avg. (config ``dllm.tasks.average``; default all); a column left out is shown, its
    header marked, and the caption gives the range of the rows' accuracies there and why (the CSV's ``in_average``)."""
    loglik = loglikelihood_tasks(results, tasks)
    records = []
    for name, row in rows.items():
        res = results[name]["results"]
        for task in tasks:
            m = metrics[task]
            metric, filt = m.split(",", 1)
            r = res[task]
            se = r.get(f"{metric}_stderr,{filt}")
            records.append(
                {
                    "row": name,
                    "label": row["label"],
                    "task": task,
                    "column": columns[task],
                    "metric": m,
                    "value": 100 * float(r[m]),
                    "stderr": 100 * float(se) if isinstance(se, (int, float)) else None,
                    "n": results[name]["n-samples"][task]["effective"],
                    "decoder_independent": task in loglik,
                    "model": row.get("model"),
                    "proxy": row.get("proxy"),
                    "delta_to": row.get("delta_to"),
                }
            )
    df = pd.DataFrame.from_records(records)
    average = [t for t in tasks if average is None or t in average]
    df["in_average"] = df.task.isin(average)
    avg = df[df.in_average].groupby("row", sort=False)["value"].mean()
    for name, row in rows.items():
        base = row.get("delta_to")
        if base:
            cur = df.loc[df.row == name, "value"].to_numpy()
            ref = df.loc[df.row == base, "value"].to_numpy()
            indep = df.loc[df.row == name, "decoder_independent"].to_numpy(bool)
            df.loc[df.row == name, "delta"] = np.where(indep, np.nan, cur - ref)
            if indep.any():
                df.loc[(df.row == name) & df.decoder_independent, "delta_note"] = LOGLIK_NOTE
            eff = (effects or {}).get(name)
            if eff is not None:
                for t in tasks:
                    if t not in loglik:
                        se = eff.get("tasks", {}).get(t, {}).get("se", float("nan"))
                        df.loc[(df.row == name) & (df.task == t), "delta_se"] = se
            eff = eff or {}
            for t, v in eff.get("tasks", {}).items():
                df.loc[(df.row == name) & (df.task == t), "changed"] = v["changed"]
            if eff.get("window"):
                for k in ("disagree", "steered", "padding", "answer"):
                    df.loc[df.row == name, k] = eff["window"].get(k)
                df.loc[df.row == name, "candidate_temperature"] = (eff.get("options") or {}).get("temperature")
    rooms = {b: r for b, r in (rooms or {}).items() if b in rows}
    if rooms:
        df = pd.concat([df, room_frame(rooms, rows, tasks, columns, df)], ignore_index=True)
    notes = list(dict.fromkeys(row["note"] for row in rows.values() if row.get("note")))  # one mark per text
    marks = {n: (rf"$^{{\dagger{i}}}$" if len(notes) > 1 else r"$^{\dagger}$") for i, n in enumerate(notes, 1)}
    backbones = {row["delta_to"] for row in rows.values() if row.get("delta_to")}
    cells, vals, keep, groups, at = [], [], [], [], {}
    for name, row in rows.items():
        sub = df[df.row == name].set_index("task")
        base = row.get("delta_to")
        out, val = [], []
        for t in tasks:
            v, se = sub.loc[t, "value"], sub.loc[t, "stderr"]
            cell = _pm(v, se, 1)
            if base:
                cell += " " + (f"({LOGLIK_NOTE})".replace("—", "---") if t in loglik else _delta(sub.loc[t, "delta"]))
            out.append(cell)
            val.append(v)
        a = avg[name]
        if base and loglik:  # the mean change over the columns a decoder can change
            changes = [sub.loc[t, "delta"] for t in average if t not in loglik]
            a_cell = _delta(float(np.mean(changes))) if changes else f"({LOGLIK_NOTE})".replace("—", "---")
        elif base:
            a_cell = _delta(a - avg[base])
        out.append(f"{a:.1f}" + (" " + a_cell if base else ""))
        val.append(a)
        label = row["label"].replace("%", r"\%")
        if row.get("note"):
            label += marks[row["note"]]
        at[name] = len(cells)
        cells.append([label] + out)
        vals.append(val)
        # the AR rows are references (not bolded); a backbone opens a group that its energy/decoder rows share
        keep.append(bool(base) or name in backbones)
        groups.append(base or (name if name in backbones else "reference"))
        group = base or name
        nxt = list(rows)[list(rows).index(name) + 1] if name != list(rows)[-1] else None
        if group in rooms and (nxt is None or (rows[nxt].get("delta_to") or nxt) != group):
            for label, cells_row in room_cells(rooms[group], tasks):  # the group's last row: its room below it
                cells.append([label] + cells_row)
                vals.append([np.nan] * (len(tasks) + 1))
                keep.append(False)
                groups.append(group)
    out_of_avg = [t for t in tasks if t not in average]
    table = pd.DataFrame(
        cells, columns=["Methods"] + [columns[t] + ("*" if t in out_of_avg else "") for t in tasks] + ["Avg."]
    )
    best = best_mask(pd.DataFrame(vals), lower=False, keep=keep)
    # a column where every row guesses carries no signal: no best there (the caption's note says why)
    ranked = df[~df.row.str.contains("__")]  # the rows themselves, not their rooms
    chance = [t for t in out_of_avg if at_chance(ranked, [t])]
    for t in chance:
        best[:, tasks.index(t)] = False
    bold = np.column_stack([np.zeros(len(cells), bool), best])
    df["best"] = [bool(best[at[r], tasks.index(t)]) if r in at else False for r, t in zip(df.row, df.task)]
    df["best_average"] = [bool(best[at[r], len(tasks)]) if r in at else False for r in df.row]
    caption = (
        r"Accuracy (\%) per benchmark (the paper's column names for our tasks), $\pm$ its standard error "
        r"(lm-eval); in brackets the change from the row's backbone (\textcolor{green!50!black}{gain}, "
        r"\textcolor{red}{loss}; the paired s.e. of each change is in the CSV). The best diffusion row of each "
        r"column is in \textbf{bold} (the AR rows left out"
        + (", and the columns at chance: no best there" if chance else "")
        + ")."
    )
    if loglik:
        names = ", ".join(columns[t] for t in tasks if t in loglik).replace("%", r"\%")
        caption += (
            f" {names}: scored by log-likelihood, which no decoder changes (lm-eval's multiple-choice "
            r"scoring): their change is n/a and the change of Avg.\ is the mean change over the other columns."
        )
    for note, mark in marks.items():  # the rows' notes, in the caption
        caption += " " + f"{mark} {note}".replace("%", r"\%").replace("_", r"\_")
    ratio = proxy_ratios(rows, avg)
    if ratio:
        caption += ("" if caption.rstrip().endswith(".") else ".") + " " + ratio
    note = effect_note(rows, effects or {})
    if note:
        caption += " " + note
    if rooms:
        caption += " " + ROOM_NOTE
    if out_of_avg:
        caption += " " + out_of_average_note(ranked, out_of_avg, columns, guessing=set(chance) == set(out_of_avg))
    return latex_float(
        table, caption=caption, label="tab:dllm", bold=bold, groups=groups, packages=("booktabs", "adjustbox", "xcolor")
    ), df


def at_chance(df: pd.DataFrame, tasks: list[str], chance: float = 0.25) -> bool:
    """Whether every row's accuracy in each of ``tasks`` (Table 3's long frame: ``task``, ``value`` in %, ``n``) is
    within 2 binomial s.e. of guessing (``chance``)."""
    for r in df[df.task.isin(tasks)].itertuples():
        se = 100 * math.sqrt(chance * (1 - chance) / max(1, int(r.n)))
        if abs(r.value - 100 * chance) > 2 * se:
            return False
    return True


def out_of_average_note(df: pd.DataFrame, tasks: list[str], columns: dict, guessing: bool, chance: float = 0.25) -> str:
    """The caption's sentence on the columns left out of Avg. (config ``dllm.tasks.average``): each column's range of
    accuracies over the rows, and why they are left out: ``guessing`` (every row within 2 binomial s.e. of
    ``chance`` in each of them, :func:`at_chance`) or the configuration."""
    spans = []
    for t in tasks:
        sub = df[df.task == t]
        spans.append(f"{columns[t]} {sub.value.min():.1f}--{sub.value.max():.1f}\\%")
    why = (
        f"every row is within 2 s.e. of guessing one of four letters ({100 * chance:.0f}\\%): no model learns the "
        "answers, so these columns carry no signal either way"
        if guessing
        else "left out of the average by the configuration (dllm.tasks.average)"
    )
    return f"*Not in Avg. ({'; '.join(spans)}): {why}."


ROOM_NOTE = (
    r"\emph{Room} rows: the change (points) that the best / the worst selection among the window's "
    r"candidates reaches against the backbone (any energy, any proxy, an oracle: every path of the candidate "
    r"tree, each decoded to the end and scored), so a level row reads as \emph{no room} when the ceiling is "
    r"itself level and \emph{room not taken} when it is not; \emph{Decided}: the items in which a choice "
    r"inside the window changes the score."
)


def room_cells(room: dict, tasks: list[str]) -> list[tuple[str, list[str]]]:
    """Table 3's two room rows of one backbone (:func:`table3`): ``(label, cells)`` for the ceiling / floor and the
    share decided, per task and on the average (a ``≥`` / ``≤`` when the tree was cut: bounds)."""
    c, f, d = room["ceiling"], room["floor"], room["decides"]
    cut = room.get("exhaustive", 1.0) < 1.0
    up, down = (r"$\geq$" if cut else ""), (r"$\leq$" if cut else "")

    def pair(ct, ft):
        if not ct or not ft:
            return DASH
        return f"{up}{ct['delta']:+.1f} / {down}{ft['delta']:+.1f}"

    room_row = [pair(c["tasks"].get(t), f["tasks"].get(t)) for t in tasks] + [pair(c["avg"], f["avg"])]
    decided = [_pct(d["tasks"].get(t)) + r"\%" if t in d["tasks"] else DASH for t in tasks] + [
        _pct(d.get("avg")) + r"\%" if d.get("avg") is not None else DASH
    ]
    return [(r"\quad\emph{room: ceiling / floor}", room_row), (r"\quad\emph{decided in the window}", decided)]


def room_frame(rooms: dict, rows: dict, tasks: list[str], columns: dict, df: pd.DataFrame) -> pd.DataFrame:
    """The CSV's room rows (:func:`table3`) and, on ``df`` in place, each Algorithm 3 row's share of the ceiling."""
    out = []
    for backbone, room in rooms.items():
        base = df[df.row == backbone].set_index("task")
        for kind in ("ceiling", "floor"):
            for t in tasks:
                e = room[kind]["tasks"].get(t)
                if e is None:
                    continue
                out.append(
                    {
                        "row": f"{backbone}__{kind}",
                        "label": f"{rows[backbone]['label']}: window {kind}",
                        "task": t,
                        "column": columns[t],
                        "value": base.loc[t, "value"] + e["delta"],
                        "n": e["n"],
                        "delta_to": backbone,
                        "delta": e["delta"],
                        "delta_se": e["se"],
                        "decides": room["decides"]["tasks"].get(t),
                        "exhaustive": room.get("exhaustive"),
                    }
                )
        for name, rec in room.get("rows", {}).items():
            if name in rows:
                df.loc[df.row == name, "share"] = rec["share"]["share"]
                df.loc[df.row == name, "share_se"] = rec["share"]["se"]
    return pd.DataFrame.from_records(out)


def _delta(d: float) -> str:
    """A change from the backbone, coloured as the paper does (green gain, red loss)."""
    colour = "green!50!black" if d > 0 else ("red" if d < 0 else "black")
    return rf"\textcolor{{{colour}}}{{({d:+.1f})}}"


def throughput_source(sweep: dict) -> str:
    """Where a sweep's tokens/s come from (its ``points.json``'s ``timing.source``; a file written before the key
    existed was timed): the scored lm-eval pass on its threads, or the median of the timed passes."""
    timing = sweep.get("timing") or {}
    if timing.get("source", "timed") == "timed":
        return f"median of {timing.get('repeats', 3)} timed passes"
    threads = sorted({p["timing"].get("threads") for p in sweep["points"] if p.get("timing", {}).get("threads")})
    on = f" on {'/'.join(map(str, threads))} thread{'s' if threads != [1] else ''}" if threads else ""
    return f"the scored lm-eval pass{on}"


def sweep_table(sweep: dict, caption: str) -> tuple[str, pd.DataFrame]:
    """An appendix k/w table: one row per value of the varied option (``points.json`` of rule ``dllm_sweep``):
    accuracy (± its s.e. from lm-eval) and throughput.  The CSV is long like Table 3's (``row`` = ``k=2``, the
    paper's row name; ``column`` = ``Accuracy``; ``value``), with the throughput in ``tokens_per_s``."""
    pts = pd.DataFrame(sweep["points"])
    key = pts.key.iloc[0]
    df = pd.DataFrame(
        {
            "row": [f"{key.lower()}={v}" for v in pts.value],
            "column": "Accuracy",
            "value": pts.accuracy,
            "stderr": pts.stderr,
            "n": pts.n,
            "tokens_per_s": pts.tokens_per_s,
            "nfe": pts.nfe,
            "curve": pts.curve,
            "label": pts.label,
            "option": key,
            "option_value": pts.value,
        }
    )
    caption = (
        caption.replace("_", "\\_")
        + f" Tokens/s: {throughput_source(sweep)}."
        + r" The best accuracy is in \textbf{bold}."
    )
    task = sweep["task"].replace("_", chr(92) + "_")
    cells = pd.DataFrame(
        {
            f"${key}$": [str(v) for v in df.option_value],
            f"{task} accuracy (\\%)": [_pm(v, e, 1) for v, e in zip(df.value, df.stderr)],
            "tokens/s": [f"{v:.0f}" for v in df.tokens_per_s],
        }
    )
    df["best"] = best_mask(df[["value"]], lower=False)[:, 0]
    bold = np.column_stack([np.zeros(len(df), bool), df["best"].to_numpy(), np.zeros(len(df), bool)])
    return latex_float(cells, caption=caption, label=f"tab:sweep-{key.lower()}", bold=bold, column_format="lrr"), df


SELECTION_LABELS = {"argmin": "argmin (paper)", "resample": "resample", "proxy_rerank": "proxy rerank"}


def _pct(v, nd=0) -> str:
    return DASH if _missing(v) else f"{100 * v:.{nd}f}"


def selection_table(
    rows: dict, results: dict, effects: dict, metrics: dict, tasks: list[str], rooms: dict | None = None
) -> tuple[str, pd.DataFrame]:
    """The appendix's selection-rule table (beyond the paper): for each backbone, Algorithm 3 with each energy under
    each selection rule, against the backbone's own decoder on the same items.

    ``rows``: row name -> config row (``label``, ``delta_to``, ``options``); ``results``: row -> lm-eval's results
    JSON; ``effects``: decoder row -> its ``effect.json`` (:func:`unie.eval.metrics.paired_effect` and
    :func:`unie.eval.metrics.window_shares`).  Per row: the seven-task average accuracy (± its s.e.,
    ``sqrt(Σ se_t²) / T``), its paired change from the backbone ± s.e., the share of window iterations whose ``K``
    candidates reveal different tokens (disagree), the share where the chosen reveal is not the greedy candidate's
    (steered) and the share of completions that differ from the backbone's (changed).  ``rooms`` (backbone -> its
    room record, :mod:`unie.eval.room`): each rule row gains its backbone's ceiling and floor (the best and worst
    any selection among the window's candidates reaches, paired against the backbone), its change as a share of the
    ceiling's, and the reading of a level row (:func:`unie.eval.room.room_reading`)."""
    rooms = rooms or {}
    records = []
    for name, row in rows.items():
        res = results[name]["results"]
        vals, ses = [], []
        for t in tasks:
            metric, filt = metrics[t].split(",", 1)
            vals.append(100 * float(res[t][metrics[t]]))
            se = res[t].get(f"{metric}_stderr,{filt}")
            ses.append(100 * float(se) if isinstance(se, (int, float)) else float("nan"))
        eff = effects.get(name) or {}
        avg, win = eff.get("avg") or {}, eff.get("window") or {}
        records.append(
            {
                "row": name,
                "label": row["label"],
                "backbone": row.get("delta_to") or name,
                "energy": eff.get("energy"),
                "selection": eff.get("selection"),
                "avg": float(np.mean(vals)),
                "avg_se": float(np.sqrt(np.sum(np.square(ses)))) / len(ses),
                "delta": avg.get("delta"),
                "delta_se": avg.get("se"),
                "detectable": avg.get("detectable"),
                "disagree": win.get("disagree"),
                "steered": win.get("steered"),
                "changed": avg.get("changed"),
                "padding": win.get("padding"),
                "answer": win.get("answer"),
                "items": avg.get("items"),
            }
        )
        room = rooms.get(row.get("delta_to"))
        if room is not None:
            share = room.get("rows", {}).get(name, {}).get("share", {})
            records[-1].update(
                {
                    "ceiling": room["ceiling"]["avg"]["delta"],
                    "ceiling_se": room["ceiling"]["avg"]["se"],
                    "floor": room["floor"]["avg"]["delta"],
                    "floor_se": room["floor"]["avg"]["se"],
                    "share": share.get("share"),
                    "share_se": share.get("se"),
                    "reading": room_reading(
                        avg.get("delta"), avg.get("se"), room["ceiling"]["avg"]["delta"], room["ceiling"]["avg"]["se"]
                    ),
                }
            )
    df = pd.DataFrame.from_records(records)
    has_room = "ceiling" in df
    cells = []
    for r in df.itertuples():
        is_base = r.row == r.backbone
        delta = DASH if is_base or _missing(r.delta) else rf"{r.delta:+.1f}{{\scriptsize $\pm${r.delta_se:.1f}}}"
        room_cells_ = []
        if has_room:
            room_cells_ = (
                [DASH, DASH, DASH]
                if is_base or _missing(r.ceiling)
                else [
                    rf"{r.ceiling:+.1f} / {r.floor:+.1f}",
                    DASH
                    if _missing(r.share)
                    else rf"{100 * r.share:.0f}{{\scriptsize $\pm${100 * r.share_se:.0f}}}\%"
                    if not _missing(r.share_se)
                    else rf"{100 * r.share:.0f}\%",
                    r.reading,
                ]
            )
        cells.append(
            [
                r.label,
                DASH if is_base else (r.energy or DASH),
                DASH if is_base else SELECTION_LABELS.get(r.selection, r.selection or DASH),
                _pm(r.avg, r.avg_se, 1),
                delta,
                *room_cells_,
                _pct(r.disagree),
                _pct(r.steered),
                DASH if is_base else _pct(r.changed),
                _pct(r.answer),
                _pct(r.padding),
            ]
        )
    room_header = ["Room", "Share", "Reading"] if has_room else []
    table = pd.DataFrame(
        cells,
        columns=[
            "Methods",
            "Energy",
            "Selection",
            "Avg.",
            r"$\Delta$ Avg.",
            *room_header,
            r"Disagree (\%)",
            r"Steered (\%)",
            r"Changed (\%)",
            r"Window (\%)",
            r"Padding (\%)",
        ],
    )
    caption = (
        r"Selection rules of Algorithm 3 (beyond the paper): the average accuracy (\%) over the benchmarks "
        r"$\pm$ its s.e.; $\Delta$: its paired change from the backbone's own decoder on the same items "
        r"$\pm$ the paired s.e.; Disagree: window iterations whose $K$ candidates reveal different tokens; "
        r"Steered: those where the chosen reveal is not candidate 0's; Changed: completions that "
        r"differ from the backbone's; Window: the share of an average answer's tokens decided in the window; "
        r"Padding: the share of the window's reveals after the answer's end.  argmin is the paper's rule, "
        r"resample draws from "
        r"$\mathrm{softmax}(-E/\tau)$ (importance sampling), proxy rerank keeps the reveal that the proxy "
        r"finds most likely (the released code's rule; it reads no energy)."
    )
    if has_room:
        caption += (
            r" Room: the change of the average that the best / the worst selection among the window's "
            r"candidates reaches (ceiling / floor, every path of the candidate tree); Share: the row's change "
            r"as a share of the ceiling's $\pm$ its bootstrap s.e.; Reading: a change beyond 2 paired s.e. is a "
            r"gain or a loss, a level row has \emph{no room} when the ceiling is itself within 2 s.e., else "
            r"the \emph{room} was \emph{not taken}."
        )
    return latex_float(table, caption=caption, label="tab:selection", groups=list(df.backbone), size="scriptsize"), df


def proxy_ratios(rows: dict, avg) -> str:
    """The caption's sentence on the proxy's strength: the average of the AR row whose model is the decoder rows'
    proxy, as a multiple of each backbone's average (``avg``: row name -> average accuracy).  Empty when no
    row shows the proxy (one sentence per distinct proxy)."""
    parts = []
    for proxy in dict.fromkeys(r["proxy"] for r in rows.values() if r.get("proxy") and r.get("delta_to")):
        own = next(
            (
                n
                for n, r in rows.items()
                if r.get("model") == proxy
                and not r.get("delta_to")
                and not r.get("proxy")
                and n not in {x.get("delta_to") for x in rows.values()}
            ),
            None,
        )
        if own is None:
            continue
        bases = dict.fromkeys(r["delta_to"] for r in rows.values() if r.get("proxy") == proxy and r.get("delta_to"))
        ratios = ", ".join(
            f"{avg[own] / avg[b]:.2f}$\\times$ {rows[b]['label']}'s ({avg[b]:.1f})" for b in bases if avg[b] > 0
        )
        parts.append(f"The proxy of the decoder rows ({rows[own]['label']}, average {avg[own]:.1f}) is {ratios}.")
    return " ".join(parts).replace("%", r"\%")


def effect_note(rows: dict, effects: dict) -> str:
    """One sentence per backbone for Table 3's caption on its Algorithm 3 rows: their candidate temperature, where the
    window acts (the share of an average answer it decides, the share of its reveals that are padding), how often
    the candidates disagree, and per row the share of completions changed and the paired change of the average ±
    s.e. (from the rows' ``effect.json``; what the rows share is said once)."""
    by_backbone: dict[str, list[str]] = {}
    for name, row in rows.items():
        eff = effects.get(name)
        if eff and eff.get("window"):
            by_backbone.setdefault(row.get("delta_to"), []).append(name)
    parts = []
    for base, names in by_backbone.items():
        first = effects[names[0]]
        win, tau = first["window"], (first.get("options") or {}).get("temperature")
        where = ""
        if win.get("padding") is not None and win.get("answer") is not None:
            where = (
                f"the window decides {100 * win['answer']:.0f}\\% of an average answer "
                f"({100 * win['padding']:.0f}\\% of its reveals padding), "
            )
        each = ", ".join(
            f"{rows[n]['label']} {100 * effects[n]['avg']['changed']:.0f}\\% of completions changed, "
            f"average {effects[n]['avg']['delta']:+.1f} $\\pm$ {effects[n]['avg']['se']:.1f}"
            for n in names
        )
        parts.append(
            f"on {rows.get(base, {}).get('label', base)}"
            + (f" (candidates at $\\tau$ = {tau:g})" if tau is not None else "")
            + f": {where}{100 * win['disagree']:.0f}\\% of window iterations disagree; {each}"
        )
    return ("Algorithm 3 rows " + "; ".join(parts) + ".") if parts else ""


MAP_RULE_ORDER = ("ind", "inv", "uni", "rerank", "apd")


def _w_label(w) -> str:
    return DASH if _missing(w) else f"w = {w:g}"


def map_frame(jobs: list[dict]) -> pd.DataFrame:
    """The map (the ``points.json`` of rules ``dllm_map_{job}``) as one long frame, one line per cell: its backbone,
    candidate draw, window ``w``, rule and proxy (``any`` for a rule that reads none; ``mixNN`` the continuum's
    mixture with λ = NN %), the paired change of the average accuracy against the backbone ± s.e., the proxy's
    judgement (pairwise AUC of the rule's energy over the tree's candidates ± bootstrap s.e.), the change as a share of
    the ceiling and the reading; the tree's room (ceiling, floor ± paired s.e., the share of items decided, the share
    of trees explored whole) and the backbone's own judgement (``dlm_auc``) on each line of its tree.  With
    ``dllm.map.whole`` the room, the judgements and the shares are on the ``whole_items`` whose trees are explored
    whole, each change on all ``items`` (``delta_whole``: the change on the whole trees' items).  APD's points
    (lm-eval runs, no window) have rule ``apd``; rule ``break_even`` lines hold each rule's break-even judgement along
    the continuum (``auc`` ± ``auc_se``; ``chain_from``, ``chain_to``: its ends, the learned proxy and the oracle).
    ``backbone_avg``, ``proxy_avg``: their own averages on the items."""
    points = [p for job in jobs for p in job["points"]]
    alone = {p["proxy"]: p["avg"] for p in points if p["rule"] == "proxy_alone"}
    base = {p["backbone"]: p["avg"] for p in points if p["rule"] == "backbone"}
    labels = {p["backbone"]: p["label"] for p in points if p["rule"] == "backbone"}
    proxies = {k: v for job in jobs for k, v in job.get("proxies", {}).items()}
    rows = []

    def common(b):
        return {"backbone": b, "backbone_label": labels.get(b, b), "backbone_avg": base.get(b)}

    for p in points:
        if p["rule"] != "apd":
            continue
        e = p.get("effect") or {}
        rows.append(
            {
                **common(p["backbone"]),
                "rule": "apd",
                "label": p["label"],
                "proxy": p["proxy"],
                "proxy_label": proxies.get(p["proxy"], {}).get("label", p["proxy"]),
                "proxy_avg": alone.get(p["proxy"], float("nan")),
                "draw": None,
                "w": None,
                "delta": e.get("delta"),
                "se": e.get("se"),
                "items": sum((p.get("n") or {}).values()) or None,  # APD's own items (dllm.map.apd.whole_only)
            }
        )
    for job in jobs:
        b = job["job"]
        for t in job.get("trees", []):
            from ..dllm.rows import draw_label

            room = {
                "draw": draw_label(t["draw"]),
                "w": t["w"],
                "ceiling": t["ceiling"]["avg"]["delta"],
                "ceiling_se": t["ceiling"]["avg"]["se"],
                "floor": t["floor"]["avg"]["delta"],
                "floor_se": t["floor"]["avg"]["se"],
                "decides": t["decides"]["avg"],
                "exhaustive": t["exhaustive"],
                "dlm_auc": t["auc"]["dlm"]["auc"],
                "dlm_auc_se": t["auc"]["dlm"]["se"],
                "items": t["items"],
                "whole_items": t.get("whole_items", t["items"]),
            }
            for c in t["cells"]:
                e, a, sh = c["effect"], c["auc"], c["share"]
                rows.append(
                    {
                        **common(b),
                        **room,
                        "rule": c["rule"],
                        "label": c["rule"],
                        "proxy": c["proxy"],
                        "proxy_label": proxies.get(c["proxy"], {}).get("label", c["proxy"]),
                        "proxy_avg": alone.get(c["proxy"], float("nan")),
                        "delta": e["delta"],
                        "se": e["se"],
                        # the change on the items whose trees are whole (the room's, the share's own items)
                        "delta_whole": (c.get("effect_whole") or e)["delta"],
                        "se_whole": (c.get("effect_whole") or e)["se"],
                        "auc": a["auc"],
                        "auc_se": a["se"],
                        "share": sh["share"],
                        "share_se": sh["se"],
                        "reading": c["reading"],
                    }
                )
            for rule, be in (t.get("break_even") or {}).items():
                rows.append(
                    {
                        **common(b),
                        **room,
                        "rule": "break_even",
                        "label": rule,
                        "proxy": None,
                        "auc": be["auc"],
                        "auc_se": be["se"],
                        # the continuum's ends (scorer names ``{rule}__{proxy}``): the learned proxy, the oracle
                        "chain_from": be["points"][0][0].split("__", 1)[1] if be.get("points") else None,
                        "chain_to": be["points"][-1][0].split("__", 1)[1] if be.get("points") else None,
                    }
                )
    return pd.DataFrame.from_records(rows)


def _cell(v, se, nd=1, sign=True) -> str:
    if _missing(v):
        return DASH
    body = f"{v:+.{nd}f}" if sign else f"{v:.{nd}f}"
    return body + ("" if _missing(se) else rf"{{\scriptsize $\pm${se:.{nd}f}}}")


def map_table(jobs: list[dict]) -> tuple[str, pd.DataFrame]:
    """The map as a table (beyond the paper): for each candidate draw and window (a group), the room of each
    backbone's window (ceiling, floor, items decided, the backbone's own judgement), each proxy's judgement (the AUC
    of proxy rerank: the proxy's own score) and each rule's paired change with each proxy (weakest to the oracle);
    then APD per proxy and each rule's break-even judgement along the continuum.  The CSV is :func:`map_frame`."""
    df = map_frame(jobs)
    m_proxies = {k: v for job in jobs for k, v in job.get("proxies", {}).items()}
    proxies = list(m_proxies)
    plabel = {k: v.get("label", k) for k, v in m_proxies.items()}
    backbones = list(dict.fromkeys(df.backbone))
    blabel = {b: df[df.backbone == b].backbone_label.iloc[0] for b in backbones}
    cells, groups = [], []
    ncol = len(proxies)
    trees = df[df.rule.isin(MAP_RULE_ORDER[:-1])]
    for (draw, w), sub in trees.groupby(["draw", "w"], sort=False):
        key = f"{draw}, w = {w:g}".replace("τ", r"$\tau$")
        room_row, auc_row = [key, r"\emph{room}"], ["", r"\emph{judgement (AUC)}"]
        for b in backbones:
            r = sub[sub.backbone == b]
            if r.empty:
                room_row += [DASH] * ncol
                auc_row += [DASH] * ncol
                continue
            r0 = r.iloc[0]
            bound = "" if r0.exhaustive >= 1.0 else r"$\geq$"
            room_row += (
                [
                    f"ceil. {bound}{_cell(r0.ceiling, r0.ceiling_se)}",
                    f"floor {_cell(r0.floor, r0.floor_se)}",
                    f"decided {100 * r0.decides:.0f}\\%",
                    f"DLLM {_cell(r0.dlm_auc, r0.dlm_auc_se, 2, False)}",
                ]
                + [""] * max(0, ncol - 4)
            )[:ncol]
            for p in proxies:
                hit = r[(r.rule == "rerank") & (r.proxy == p)]
                auc_row.append(DASH if hit.empty else _cell(hit.auc.iloc[0], hit.auc_se.iloc[0], 2, False))
        cells += [room_row, auc_row]
        groups += [key, key]
        for rule in [x for x in MAP_RULE_ORDER[:-1] if x in set(sub.rule)]:
            row = ["", rule.replace("_", r"\_")]
            for b in backbones:
                r = sub[(sub.backbone == b) & (sub.rule == rule)]
                for p in proxies:
                    hit = r[(r.proxy == p) | (r.proxy == "any")]
                    row.append(DASH if hit.empty else _cell(hit.delta.iloc[0], hit.se.iloc[0]))
            cells.append(row)
            groups.append(key)
    apd = df[df.rule == "apd"]
    if not apd.empty:
        row = ["APD", "(own drafts)"]
        for b in backbones:
            for p in proxies:
                hit = apd[(apd.backbone == b) & (apd.proxy == p)]
                row.append(DASH if hit.empty else _cell(hit.delta.iloc[0], hit.se.iloc[0]))
        cells.append(row)
        groups.append("apd")
    header = ["Candidates, window", "Rule"] + [f"{blabel[b]}: {plabel[p]}" for b in backbones for p in proxies]
    be = df[df.rule == "break_even"]
    be_text = "; ".join(
        f"{blabel[r.backbone]} {r.label} ({r.draw}, w = {r.w:g}): "
        + ("never" if _missing(r.auc) else f"{r.auc:.2f} $\\pm$ {r.auc_se:.2f}")
        for r in be.itertuples()
    ).replace("τ", r"$\tau$")
    points = [p for job in jobs for p in job["points"]]
    alone = "; ".join(
        f"{plabel.get(p['proxy'], p['proxy'])} {p['avg']:.1f}\\%" for p in points if p["rule"] == "proxy_alone"
    )
    base = "; ".join(f"{p['label']} {p['avg']:.1f}\\%" for p in points if p["rule"] == "backbone")
    cont = next((j.get("continuum") for j in jobs if j.get("continuum")), {}) or {}
    tasks = ", ".join(jobs[0]["tasks"]).replace("_", r"\_")
    limit, n_items, whole = (jobs[0].get(k) for k in ("limit", "items", "whole"))
    per_task = min(x for x in (limit, n_items) if x) if (limit or n_items) else None
    items_text = (f"{per_task} test items per task of " if per_task else "every test item of ") + f"{tasks}"
    if n_items:
        items_text += " (the map's own draw of the tasks, Table 3's items first)"
    if any(t.get("whole_items", t["items"]) < t["items"] for job in jobs for t in job.get("trees", [])):
        items_text += (
            rf"; the room, the judgements and the break-even AUCs on the first {whole} per task (their trees explored "
            r"whole up to the cap), each rule's change on all of them (the others read along the rule's own path)"
        )
    apd_limits = {p.get("limit") for p in points if p["rule"] == "apd"}
    if len(apd_limits) == 1 and (lim := apd_limits.pop()) is not None and lim != per_task:
        items_text += (
            f"; APD on the first {lim} per task (its change paired with the backbone's on them; no window, no tree)"
        )
    caption = (
        r"When does Uni-E help a DLLM? (beyond the paper) For each candidate draw ($\tau$: the candidates' "
        r"temperature; greedy first: candidate 0 is the backbone's greedy $\hat x_0$) and window $w$: the "
        r"\emph{room} of the backbone's window (the change of the average accuracy, points, that the best and the "
        r"worst selection among the window's candidates reach, every path of the candidate tree decoded and "
        r"scored, $\pm$ paired s.e.; $\geq$: a tree cut at its cap, a bound; decided: items in which a choice "
        r"inside the window changes the score; DLLM: the pairwise AUC of the backbone's own "
        r"$\log p_\theta(x_s|x_t)$ over the tree's candidates), each proxy's \emph{judgement} (the AUC of its "
        r"own score, proxy rerank's: 0.5 is none, 1 a perfect one) and each rule's paired change against the "
        r"backbone on the same items $\pm$ its paired s.e., per proxy from weak to an $\varepsilon$-smoothed "
        rf"oracle ($\varepsilon$ = {jobs[0].get('oracle_eps', 0.05):g}). Items: "
        + items_text
        + rf". Backbones: {base}. The "
        rf"proxies decoding alone: {alone}. Inv-E reads no proxy under teacher forcing (one value under every "
        r"proxy). Break-even judgement (the AUC at which a rule's change crosses 0 along "
        rf"$\lambda \cdot$ oracle + $(1-\lambda) \cdot$ {cont.get('proxy', 'proxy')}, $\lambda \in$ "
        rf"\{{0, {', '.join(f'{x:g}' for x in cont.get('lambdas', []))}, 1\}}, $\pm$ bootstrap s.e.): "
        + (be_text or "none")
        + "."
    )
    table = pd.DataFrame(cells, columns=header)
    return latex_float(table, caption=caption, label="tab:map", groups=groups, size="scriptsize"), df
