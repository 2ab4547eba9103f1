"""Figures from the workflow's result records (never from hand-typed numbers).

Each function takes parsed result JSONs (which carry their identity) and returns the matplotlib figure
and the ``DataFrame`` of the plotted points; the pipeline writes the PDF/PNG/CSV files.
"""

from __future__ import annotations

import pandas as pd

CONTEXT_TITLES = {
    "teacher_forced": "AR context: teacher forced",
    "masked": "AR context: masked state",
    "exact": r"AR context: exact $\pi$ (oracle)",
}

# One error-bar convention for every figure (the tables' too: "± s.e."), stated on each figure.
SE_BARS = 1
ERROR_BARS = "error bars: ±1 s.e."

# One colour per row, the same in every figure and notebook plot (Tables 1-2's rows, Figure 2's energies, Table 3's
# and Figure 4's decoders); no two rows share one.  A label "X (rule)" not listed is row X drawn with another rule
# (same colour, the figure changes the line style); "No energy" in Figure 2 is the MDLM run.
ROW_COLOURS = {
    "Data": "#000000",
    "AR": "#7f7f7f",
    "SEDD": "#ff7f0e",
    "MDLM": "#1f77b4",
    "Duo": "#2ca02c",
    "Block Diffusion": "#9467bd",
    "DCD": "#8c564b",
    "ReMDM": "#e377c2",
    "EDLM-AR": "#bcbd22",
    "EDLM-CoAR": "#17becf",
    "EDLM-NCE": "#7b4173",
    "Uni-EDLM-AR": "#d62728",
    "Uni-EDLM-NCE": "#ff9896",
    "Inv-E": "#393b79",
    "Ind-E": "#637939",
    "Uni-E": "#ad494a",
    "AR proxy": "#525252",
    "AR (large)": "#969696",
    "AR (large, 2nd recipe)": "#c7c7c7",
    "LLaDA-like": "#3182bd",
    "Dream-like": "#756bb1",
    "+APD": "#e6550d",
    "+DAWN": "#31a354",
    "+CoRe": "#8c6d31",
    "+Uni-Energy": "#a50f15",
    "+Ind-Energy": "#fd8d3c",
    "+Inv-Energy": "#6baed6",
    "+proxy rerank": "#843c39",
    "Fast-dLLM": "#c51b8a",
}
NO_ENERGY = "No energy"  # Figure 2's curve without an energy (the MDLM run)
ROW_ALIASES = {"Data ($\\pi$, exact)": "Data", NO_ENERGY: "MDLM"}

# for rows nobody listed: colours no listed row has (tab20b / tab20c)
SPARE_COLOURS = (
    "#5254a3",
    "#8ca252",
    "#bd9e39",
    "#d6616b",
    "#a55194",
    "#6b6ecf",
    "#b5cf6b",
    "#e7ba52",
    "#e7969c",
    "#ce6dbd",
    "#9c9ede",
    "#cedb9c",
    "#e7cb94",
    "#9ecae1",
    "#fdae6b",
    "#74c476",
    "#a1d99b",
    "#9e9ac8",
    "#636363",
)


def k_label(K: int) -> str:
    """Figure 3's name of its k-panel curve with K candidates (``k=1``: the plain sampler)."""
    return f"k={K}"


def row_key(label: str) -> str:
    """The row a label draws: itself when listed, its alias, or X for "X (rule)" with X listed."""
    label = str(label)
    if label in ROW_COLOURS:
        return label
    if label in ROW_ALIASES:
        return ROW_ALIASES[label]
    base = label.rsplit(" (", 1)[0] if label.endswith(")") else label
    base = base.removesuffix(" †")
    return base if base in ROW_COLOURS else label


def row_colours(labels) -> dict[str, str]:
    """Label -> colour for one plot: a listed row's own colour (:data:`ROW_COLOURS`), any other label a spare colour
    chosen from its name (the same in every plot) and distinct from the others of this plot."""
    import zlib

    out, taken = {}, set()
    for label in labels:
        key = row_key(label)
        if key in ROW_COLOURS:
            out[label] = ROW_COLOURS[key]
            taken.add(out[label])
    for label in labels:
        if label in out:
            continue
        start = zlib.crc32(row_key(label).encode())
        for k in range(len(SPARE_COLOURS)):
            colour = SPARE_COLOURS[(start + k) % len(SPARE_COLOURS)]
            if colour not in taken:
                break
        out[label] = colour
        taken.add(colour)
    return out


def _luminance(rgb) -> float:
    """WCAG relative luminance of an sRGB colour (components in [0, 1])."""

    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(float(c)) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a, b) -> float:
    """WCAG contrast ratio of two colours (anything matplotlib reads), 1 to 21."""
    from matplotlib.colors import to_rgb

    la, lb = sorted((_luminance(to_rgb(a)), _luminance(to_rgb(b))), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_colour(background) -> str:
    """Black or white, whichever contrasts more with ``background`` (always >= 4.5:1, WCAG AA)."""
    return "black" if contrast_ratio("black", background) >= contrast_ratio("white", background) else "white"


def selection_of(record: dict) -> str | None:
    """The candidate selection rule a Gen PPL record's samples were drawn with (``argmin``, ``resample``; the
    options the samples carry), ``None`` for a sampler without one."""
    return ((record.get("sampling") or {}).get("options") or {}).get("selection")


def genppl_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (run, steps, evaluator) of Gen PPL result records."""
    rows = []
    for r in records:
        for ev, g in r["genppl"].items():
            rows.append(
                {
                    "run": r["sampling"]["run"],
                    "steps": int(r["sampling"]["steps"]),
                    "evaluator": ev,
                    "genppl": g["ppl"],
                    "nll_se": g["nll_se"],
                    "nll": g["nll_per_token"],
                    "entropy_bits": r["entropy_bits"],
                    "seconds": r["sampling"].get("seconds"),
                    "selection": selection_of(r),
                    "entropy_se": r.get("entropy_se_bits"),
                }
            )
    return pd.DataFrame(rows)


def _selection_at(df: pd.DataFrame, run: str) -> str | None:
    """The selection rule of ``run``'s points in ``df`` (:func:`genppl_frame`), ``None`` if it has none."""
    sel = df.loc[df.run == run, "selection"].dropna().unique() if "selection" in df else []
    if len(sel) > 1:
        raise ValueError(f"run {run!r}: samples drawn with different selection rules {sorted(sel)}")
    return sel[0] if len(sel) else None


def with_selection(label: str, selection: str | None) -> str:
    """A curve's label naming its selection rule (``EDLM-AR (resample)``); unchanged when it names it already or
    the curve has none."""
    return label if selection is None or f"({selection})" in label else f"{label} ({selection})"


def fig2_ablation(fig: dict, records: list[dict]):
    """Gen PPL vs steps for no energy, Inv-E only, Ind-E only and Uni-E (each by ``argmin``, the paper's rule, unless
    its config entry names a ``selection``: Uni-E is also drawn with ``resample``); one panel per ``ar_context``.

    ``fig`` is ``config['figures']['fig2_ablation']`` plus ``runs``: context -> curve label -> the sampling run of
    that curve (:func:`unie.config.expand.fig2_runs`); ``records`` the Gen PPL results of its runs.
    Error bars: ±1 s.e. of the pooled NLL (:data:`SE_BARS`), mapped to perplexity.  The points (CSV) carry the NLL
    per token, its s.e. and the selection rule the samples were drawn with (read from the records).  Returns
    ``(figure, points)``."""
    import matplotlib.pyplot as plt
    import numpy as np

    df = genppl_frame(records)
    df = df[df.evaluator == fig["evaluator"]]
    contexts = fig["contexts"]
    curves = {NO_ENERGY: lambda ctx: fig["baseline"]}
    for label in fig["energies"]:
        curves[label] = lambda ctx, lab=label: fig["runs"][ctx][lab]
    out = []
    # each curve its row's colour (row_colours); a rule other than argmin (resample) dashed, in the colour of the
    # argmin curve of the same energy
    energy_of = {label: (e if isinstance(e, str) else e["energy"]) for label, e in fig["energies"].items()}
    colour_of = row_colours(list(curves))
    figure, axes = plt.subplots(1, len(contexts), figsize=(4.0 * len(contexts), 3.9), sharey=True, squeeze=False)
    handles = {}
    for ax, ctx in zip(axes[0], contexts):
        colours = {}
        for (label, run_of), marker in zip(curves.items(), "osD^v<>p"):
            sub = df[df.run == run_of(ctx)].sort_values("steps")
            if sub.empty:
                continue
            selection = _selection_at(df, run_of(ctx))
            lo = np.exp(sub.nll - SE_BARS * sub.nll_se)
            hi = np.exp(sub.nll + SE_BARS * sub.nll_se)
            style = {"color": colour_of[label]}
            if selection not in (None, "argmin") and energy_of.get(label) in colours:
                style = {"color": colours[energy_of[label]], "ls": "--", "mfc": "white"}
            bars = ax.errorbar(
                sub.steps,
                sub.genppl,
                yerr=[sub.genppl - lo, hi - sub.genppl],
                marker=marker,
                capsize=2,
                label=label,
                lw=1.2,
                ms=4,
                **style,
            )
            handles.setdefault(label, bars)
            colours.setdefault(energy_of.get(label), bars.lines[0].get_color())
            out += [
                {
                    "context": ctx,
                    "curve": label,
                    "run": run_of(ctx),
                    "steps": s,
                    "genppl": g,
                    "nll": n,
                    "nll_se": se,
                    "selection": selection,
                }
                for s, g, n, se in zip(sub.steps, sub.genppl, sub.nll, sub.nll_se)
            ]
        ax.set_yscale("log")
        _steps_axis(ax, sorted(df.steps.unique()))
        _plain_y(ax)
        ax.set_title(CONTEXT_TITLES.get(ctx, ctx), fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(f"Gen PPL ({fig['evaluator']})")
    # one legend for the panels, under them: it covers no point
    figure.legend(
        list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=9, frameon=False
    )
    figure.suptitle(
        f"Ablation, K={fig['K']}, w={fig['w']}: the candidate by argmin E unless the label says resample "
        f"(j ~ softmax(-E)).\n{ERROR_BARS.capitalize()} of the per-token NLL, as perplexity",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure, pd.DataFrame(out)


def _steps_axis(ax, steps) -> None:
    """A log2 axis of step counts labelled 4, 8, 16, 32 (not 2^2 ... 2^5)."""
    import matplotlib.ticker as ticker

    ax.set_xscale("log", base=2)
    ax.set_xticks([int(s) for s in steps])
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlabel("sampling steps")


def _plain_y(ax, axis: str = "y", minor=(2, 3, 5)) -> None:
    """Plain tick labels (20, 30, 50, 100) on a log axis instead of 2 x 10^1; minor ticks labelled at the leading
    digits ``minor`` only (2, 3, 5 by default, so that they never collide)."""
    import math

    import matplotlib.ticker as ticker

    def minor_label(v, _):
        lead = v / 10 ** math.floor(math.log10(v)) if v > 0 else 0
        return f"{v:g}" if round(lead, 6) in minor else ""

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(ticker.FuncFormatter(minor_label))


FLAGGED_NOTE = "† timing flagged: machine busy (hollow markers)"


def _timing_frame(timings: list[dict]) -> pd.DataFrame:
    """One row per timed point; ``trusted``: its checks passed (:mod:`unie.eval.timing`; a record written before
    the checks existed counts as trusted)."""
    rows = [
        {
            "run": t["run"],
            "steps": int(p["steps"]),
            "seconds": p["seconds"],
            "batch_size": p["batch_size"],
            "threads": t["threads"],
            "device_name": t["device_name"],
            "trusted": bool(p.get("trusted", True)),
        }
        for t in timings
        for p in t["points"]
    ]
    return pd.DataFrame(rows)


def _hollow(ax, x, y, marker) -> None:
    """Redraw the points ``(x, y)`` of the curve just drawn on ``ax`` with hollow markers (flagged timings)."""
    if len(x):
        colour = ax.get_lines()[-1].get_color()
        ax.plot(x, y, ls="none", marker=marker, ms=6, mfc="white", mec=colour, mew=1.2, zorder=5)


def fig3_summary(fig: dict, df: pd.DataFrame, times: pd.DataFrame) -> dict:
    """The paper's three Figure 3 claims, measured (``df``: :func:`genppl_frame` rows of ``fig['evaluator']``).

    * ``k``: per step count, the NLL (nats/token) of each K minus that of K = 1 (negative = K helps), with the
      s.e. of the difference (independent samples: ``sqrt(se_K^2 + se_1^2)``);
    * ``w``: per step count, the gain of window w over no energy, ``nll_0 - nll_w`` (s.e. as above), and the share
      of the full window's gain it keeps, ``(nll_0 - nll_w) / (nll_0 - nll_1)`` (only where the full window's gain
      exceeds 2 s.e.), with ``nll_0`` the no-energy run (K = 1, or the MDLM baseline);
    * ``wallclock``: per trade-off curve, the fewest steps whose Gen PPL is at most the AR's and the wall-clock
      there divided by the AR's (None when the curve never reaches the AR's Gen PPL)."""
    runs = fig["runs"]
    df = df.drop(columns="seconds", errors="ignore")
    nll = {(r.run, r.steps): (r.nll, r.nll_se, r.genppl) for r in df.itertuples()}
    steps = sorted({s for (run, s) in nll if run == runs["k"][fig["Ks"][0]]})
    base = runs["k"][1] if 1 in runs["k"] else fig["baselines"].get("MDLM")
    out = {"evaluator": fig["evaluator"], "steps": steps, "k": {}, "w": {}, "wallclock": {}}
    for K, run in runs["k"].items():
        out["k"][str(K)] = {
            str(s): {
                "dnll": nll[(run, s)][0] - nll[(base, s)][0],
                "se": (nll[(run, s)][1] ** 2 + nll[(base, s)][1] ** 2) ** 0.5,
                "genppl": nll[(run, s)][2],
            }
            for s in steps
            if (run, s) in nll and (base, s) in nll
        }
    full = runs["w"][max(runs["w"])]
    for w, run in runs["w"].items():
        pts = {}
        for s in steps:
            if (run, s) in nll and (base, s) in nll and (full, s) in nll:
                gain_full = nll[(base, s)][0] - nll[(full, s)][0]
                se_full = (nll[(base, s)][1] ** 2 + nll[(full, s)][1] ** 2) ** 0.5
                gain = nll[(base, s)][0] - nll[(run, s)][0]
                pts[str(s)] = {
                    "gain": gain,
                    "se": (nll[(base, s)][1] ** 2 + nll[(run, s)][1] ** 2) ** 0.5,
                    "gain_full": gain_full,
                    "se_full": se_full,
                    # a share of a gain that is not there (< 2 s.e.) would be noise
                    "kept": gain / gain_full if gain_full > 2 * se_full else None,
                    "genppl": nll[(run, s)][2],
                }
        out["w"][str(w)] = pts
    ar_run = fig["baselines"].get("AR")
    if ar_run is not None and not times.empty:
        ar = df[df.run == ar_run]
        ar_t = times[times.run == ar_run]
        if len(ar) and len(ar_t):
            ar_ppl, ar_sec = float(ar.genppl.iloc[0]), float(ar_t.seconds.iloc[0])
            out["ar"] = {"genppl": ar_ppl, "seconds": ar_sec, "timing_trusted": bool(ar_t.trusted.iloc[0])}
            for label, run in runs["tradeoff"].items():
                if run == ar_run:
                    continue
                sub = df[df.run == run].merge(times[times.run == run][["steps", "seconds", "trusted"]], on="steps")
                sub = sub.sort_values("steps")
                hit = sub[sub.genppl <= ar_ppl]
                first = hit.iloc[0] if len(hit) else None
                out["wallclock"][label] = {
                    "run": run,
                    "selection": _selection_at(df, run),
                    "steps": None if first is None else int(first.steps),
                    "genppl": None if first is None else float(first.genppl),
                    "seconds": None if first is None else float(first.seconds),
                    "ratio_to_ar": None if first is None else float(first.seconds) / ar_sec,
                    "best_genppl": float(sub.genppl.min()) if len(sub) else None,
                    "timing_trusted": None if first is None else bool(first.trusted) and out["ar"]["timing_trusted"],
                }
    return out


def fig3_tradeoff(fig: dict, records: list[dict], timings: list[dict]):
    """Figure 3, four panels (2 x 2): Gen PPL vs steps for each candidate size K (at w); for each window w (at K);
    Gen PPL and entropy vs the wall-clock of one batch (rule ``timing``) for the baselines, EDLM-AR and Uni-EDLM-AR,
    each point labelled with its step count.

    ``fig``: ``config['figures']['fig3_tradeoff']`` plus ``runs`` (:func:`unie.config.expand.fig3_runs`).
    Error bars: ±1 s.e. (:data:`SE_BARS`) of the pooled NLL mapped to perplexity, and of the mean per-sample entropy
    (records written before the entropy's s.e. was recorded have none: that panel then says so).  Returns
    ``(figure, points, summary)``."""
    import matplotlib.pyplot as plt
    import numpy as np

    df = genppl_frame(records)
    df = df[df.evaluator == fig["evaluator"]].drop(columns="seconds")
    times = _timing_frame(timings)
    runs = fig["runs"]
    figure, grid = plt.subplots(2, 2, figsize=(11, 8.6))
    axes = grid.ravel()
    out = []
    entropy_bars = "entropy_se" in df and df.entropy_se.notna().all()

    def curve(ax, sub, x, y, label, marker, colour):
        sub = sub.sort_values("steps")
        if sub.empty:
            return
        if y == "genppl":
            lo, hi = np.exp(sub.nll - SE_BARS * sub.nll_se), np.exp(sub.nll + SE_BARS * sub.nll_se)
            yerr = [sub[y] - lo, hi - sub[y]]
        else:
            yerr = SE_BARS * sub.entropy_se if entropy_bars else None
        ax.errorbar(sub[x], sub[y], yerr=yerr, marker=marker, capsize=2, label=label, lw=1.2, ms=4, color=colour)

    def points(panel, label, run, sub, **extra):
        return [
            {
                "panel": panel,
                "curve": label,
                "run": run,
                "steps": r.steps,
                "genppl": r.genppl,
                "nll": r.nll,
                "nll_se": r.nll_se,
                "entropy_bits": r.entropy_bits,
                **{k: getattr(r, v) for k, v in extra.items()},
                "selection": r.selection,
                "entropy_se": getattr(r, "entropy_se", None),
            }
            for r in sub.itertuples()
        ]

    cmap = plt.get_cmap("viridis")  # K and w are ordered values, not rows: a sequential map
    for i, ((K, run), marker) in enumerate(zip(runs["k"].items(), "osD^v<>")):
        sub = df[df.run == run]
        curve(axes[0], sub, "steps", "genppl", k_label(K), marker, cmap(0.85 * i / max(1, len(runs["k"]) - 1)))
        out += points("k", k_label(K), run, sub)
    for i, ((w, run), marker) in enumerate(zip(runs["w"].items(), "osD^v<>")):
        sub = df[df.run == run]
        curve(axes[1], sub, "steps", "genppl", f"w={w}", marker, cmap(0.85 * i / max(1, len(runs["w"]) - 1)))
        out += points("w", f"w={w}", run, sub)
    flagged = False
    colours = row_colours(list(runs["tradeoff"]))
    step_labels = {2: [], 3: []}
    for (label, run), marker in zip(runs["tradeoff"].items(), "osD^v<>"):
        sub = df[df.run == run].merge(times[times.run == run][["steps", "seconds", "trusted"]], on="steps")
        bad = sub[~sub.trusted.astype(bool)]
        flagged |= len(bad) > 0
        colour = colours[label]
        label = with_selection(label, _selection_at(df, run))  # EDLM-AR (resample), Uni-EDLM-AR (argmin)
        for j, y in ((2, "genppl"), (3, "entropy_bits")):
            curve(axes[j], sub, "seconds", y, label + (" †" if len(bad) else ""), marker, colour)
            if not sub.empty:
                _hollow(axes[j], bad.seconds, bad[y], marker)
            step_labels[j] += [(str(r.steps), r.seconds, getattr(r, y), colour) for r in sub.itertuples()]
        out += points("tradeoff", label, run, sub, seconds="seconds", timing_trusted="trusted")
    for ax in axes[:2]:
        _steps_axis(ax, sorted(df.steps.unique()))
    for ax in axes[2:]:
        ax.set_xscale("log")
        _plain_y(ax, "x")
        ax.set_xlabel("wall-clock per batch (s); point labels: sampling steps")
    for ax in axes[:3]:
        ax.set_yscale("log")
        _plain_y(ax)
        ax.set_ylabel(f"Gen PPL ({fig['evaluator']})")
    axes[3].set_ylabel("entropy (bits)")
    axes[0].set_title(f"candidate size k (w={fig['w']})", fontsize=10)
    axes[1].set_title(f"window w (k={fig['K']})", fontsize=10)
    dev = times.device_name.iloc[0] if not times.empty else "?"
    bs = int(times.batch_size.iloc[0]) if not times.empty else "?"
    th = int(times.threads.iloc[0]) if not times.empty else "?"
    axes[2].set_title(f"Gen PPL vs wall-clock (k={fig['K']}, w={fig['w']})", fontsize=10)
    axes[3].set_title("entropy vs wall-clock" + ("" if entropy_bars else " (no s.e. recorded: no bars)"), fontsize=10)
    if flagged:
        for ax in axes[2:]:
            ax.text(0.02, 0.02, FLAGGED_NOTE, transform=ax.transAxes, fontsize=7, color="firebrick", va="bottom")
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    for ax in axes[:2]:
        ax.legend(fontsize=8)
    handles, names = axes[2].get_legend_handles_labels()
    figure.legend(handles, names, loc="lower center", ncol=len(names), fontsize=9, frameon=False)
    figure.suptitle(
        f"{fig['label']}: hyper-parameters and efficiency. {ERROR_BARS.capitalize()} (Gen PPL: of the "
        f"per-token NLL, as perplexity; entropy: of its mean).\nWall-clock: one batch of {bs}, median of "
        f"repeats, warm-up excluded, {th} threads, {dev}",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    for j, labels in step_labels.items():
        place_labels(axes[j], labels, fontsize=7)
    points_df = pd.DataFrame(out)
    if "selection" in points_df:  # columns added later: at the end, after the ones the CSV always had
        later = [c for c in ("selection", "entropy_se") if c in points_df]
        points_df = points_df[[c for c in points_df.columns if c not in later] + later]
    return figure, points_df, fig3_summary(fig, df, times)


CASE_KINDS = {
    "non_independent": "dependency",
    "independent": "dependency",
    "non_invariant": "invariance",
    "invariant": "invariance",
}


def case_caption(cfg: dict, kind: str, c: dict, avoided_note: str = "") -> str:
    """The selection rule of a case study (``kind`` dependency or invariance; ``c`` its record in
    ``case_studies.json``), with its maths in matplotlib mathtext."""
    i = c["index"]
    text = (
        f"Rule: {cfg['n_samples']} samples of MDLM ($K=1$) and of Uni-E ($K={cfg['K']}$, $w={cfg['w']}$, "
        f"{cfg['energy']} energy, {cfg['ar_context'].replace('_', ' ')} proxy), one batch each from the same "
        f"generator seed (row $i$ = the same start), {cfg['steps']} steps. "
    )
    if kind == "dependency":
        text += (
            r"A step's dependency gap is $\log\pi(x_S\mid x_V) - \Sigma_{i\in S}\,\log\pi(x_i\mid x_V)$ over the "
            r"tokens $S$ it revealed together ($V$: visible before it); an error is a gap "
            f"$< -{cfg['dependency_threshold']}$ nats. "
        )
    else:
        text += (
            r"A token's invariance gap is $\log\pi(x_i\mid x_V) - \log\pi(x_i\mid x_{-i})$ ($x_V$: visible "
            r"at its reveal; $x_{-i}$: the rest of the final sequence); an error is a gap "
            f"$> {cfg['invariance_threshold']}$ nats. "
        )
    text += (
        f"MDLM erred on {c['n_errors']} rows; Uni-E's same row avoided it on {c['n_avoided']} of them (Uni-E "
        f"erred on {c['n_uni_errors']} rows); shown: the worst MDLM error among those (row {i})."
    )
    return text + avoided_note


def _wrap(text: str, width: int) -> list[str]:
    """Greedy line wrap that never breaks inside ``$...$`` and counts mathtext by its visible characters."""
    import re

    words, cur, inside = [], "", False
    for ch in text:  # spaces inside maths do not split
        if ch == "$":
            inside = not inside
        if ch == " " and not inside:
            words.append(cur)
            cur = ""
        else:
            cur += ch
    words.append(cur)

    def visible(w):
        return len(re.sub(r"[${}_^]", "", re.sub(r"\\[a-zA-Z]+", "x", w)))

    lines, line, n = [], "", 0
    for w in words:
        k = visible(w)
        if line and n + 1 + k > width:
            lines.append(line)
            line, n = w, k
        else:
            line, n = (f"{line} {w}" if line else w), n + (1 if line else 0) + k
    return lines + [line] if line else lines


def case_figure(words: list[str], step, steps: int, title: str, caption: str, marked=(), width: float = 11.0):
    """One case study: the sequence's tokens in reading order (wrapped to ``width`` inches), each box coloured by
    the step that revealed it (colour bar), the tokens of the error outlined in red; ``caption`` (mathtext allowed)
    states the selection rule.  The figure's height is that of its content: no blank space."""
    import matplotlib
    import matplotlib.pyplot as plt

    # token boxes in a monospace font, so that their widths are known before drawing
    fs, char_w, pad, gap = 10, 10 * 0.6 / 72, 0.06, 0.10  # font size, inches per character, box padding, gap
    usable = width - 1.3  # the colour bar on the right
    x, row, place = 0.2, 0, []
    for w in words:
        tw = len(w) * char_w + 2 * pad
        if x + tw > usable and x > 0.2:
            x, row = 0.2, row + 1
        place.append((x + pad, row))
        x += tw + gap
    rows = row + 1
    cap_lines = _wrap(caption, 130)
    top, line_h, cap_h = 0.45, 0.42, 0.19 * len(cap_lines) + 0.2
    height = top + rows * line_h + 0.15 + cap_h
    figure = plt.figure(figsize=(width, height))
    cmap = plt.get_cmap("viridis")
    norm = matplotlib.colors.Normalize(vmin=0, vmax=max(1, steps))
    outlined = set(marked)
    for i, ((px, r), w, k) in enumerate(zip(place, words, step)):
        y = height - top - (r + 0.5) * line_h
        figure.text(
            px / width,
            y / height,
            w,
            fontsize=fs,
            family="monospace",
            va="center",
            ha="left",
            color=text_colour(cmap(norm(int(k)))),  # black or white, whichever reads better
            bbox={
                "boxstyle": "round,pad=0.3",
                "fc": cmap(norm(int(k))),
                "ec": "red" if i in outlined else "none",
                "lw": 2.0,
            },
        )
    figure.text(0.5, (height - 0.22) / height, title, fontsize=10, ha="center", va="center")
    figure.text(0.01, 0.1 / height, "\n".join(cap_lines), fontsize=8.5, va="bottom", ha="left", linespacing=1.5)
    bar_ax = figure.add_axes(
        [(width - 1.0) / width, (height - top - rows * line_h) / height, 0.12 / width, rows * line_h / height]
    )
    bar = figure.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), cax=bar_ax)
    bar.set_label("step that revealed\nthe token", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    return figure


def case_study_figure(record: dict, name: str):
    """The figure of case ``name`` (invariant, independent, non_invariant, non_independent) drawn from the record
    of rule ``case_studies`` (``results/figures/case_studies.json``): a notebook redraws it from the JSON alone."""
    kind = CASE_KINDS[name]
    case, c, cfg = record["cases"][name], record["cases"][kind], record["config"]
    words, gap, who, i = case["words"], case["gap"], case["model"], case["row"]
    if kind == "dependency":
        dep = case["dependency_gaps"]
        k = min(dep, key=dep.get) if dep else None
        what = f"worst dependency gap {gap:.2f} nats" + ("" if k is None else f" (step {k}, outlined)")
    else:
        j = case["marked"][0]
        what = f"largest invariance gap {gap:.2f} nats (token {j}, '{words[j]}', outlined)"
    note = (
        ""
        if who == "MDLM"
        else (
            " Uni-E avoided the MDLM error on this row."
            if c["avoided"]
            else " Uni-E did NOT avoid it on any row: this is the same row as the MDLM case."
        )
    )
    title = f"{name.replace('_', '-')} case ({who}, row {i}): {what}"
    return case_figure(
        words, case["reveal_step"], cfg["steps"], title, case_caption(cfg, kind, c, note), case["marked"]
    )


def fig4_spread(frames: dict):
    """Figure 4 over several trainings (the ``replicates`` target): ``frames`` is seed -> the ``fig4_dllm_tradeoff``
    CSV of that seed's run.  Each curve's points at the mean accuracy and mean throughput over the trainings, with
    bars of ±1 across-training standard deviation on both axes (the spread between trainings, not a s.e.), each
    training's own points faint behind them."""
    import matplotlib.pyplot as plt

    seeds = list(frames)
    both = pd.concat([df.assign(seed=s) for s, df in frames.items()], ignore_index=True)
    both["value"] = both["value"].astype(str)
    figure, ax = plt.subplots(figsize=(8.0, 5.6))
    colours = row_colours(list(dict.fromkeys(both.label)))
    for (curve, sub), marker in zip(both.groupby("curve", sort=False), "osD^v<>"):
        colour = colours[sub.label.iloc[0]]
        ax.scatter(sub.tokens_per_s, sub.accuracy, color=colour, alpha=0.25, s=14, marker=marker)
        g = sub.groupby("value", sort=False)
        m = g[["tokens_per_s", "accuracy"]].mean().sort_values("tokens_per_s")
        sd = g[["tokens_per_s", "accuracy"]].std(ddof=1).reindex(m.index).fillna(0.0)
        ax.errorbar(
            m.tokens_per_s,
            m.accuracy,
            xerr=sd.tokens_per_s,
            yerr=sd.accuracy,
            marker=marker,
            capsize=2,
            lw=1.2,
            ms=5,
            color=colour,
            label=f"{sub.label.iloc[0]} ({sub.key.iloc[0]})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("throughput (generated tokens/s)")
    ax.set_ylabel("accuracy")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(
        f"Figure 4 over {len(seeds)} trainings (seeds {', '.join(map(str, seeds))}): mean, bars ±1 sd "
        "across trainings; faint: each training",
        fontsize=10,
    )
    figure.tight_layout()
    return figure


def fig4_tradeoff(sweep: dict):
    """Figure 4: accuracy on one task (the MATH500 analogue) vs throughput, one curve per decoder, its
    parallelism knob varied (tokens per step ``m``, or Fast-dLLM's threshold).

    ``sweep``: a ``points.json`` of rule ``dllm_sweep`` (``points``: accuracy, its s.e. from lm-eval,
    tokens/s).  Error bars ±1 s.e. (:data:`SE_BARS`); each point labelled with its knob's value (points that fall
    on the same spot share one label, ``0.9, 0.99``).  Returns ``(figure, points)``."""
    import math

    import matplotlib.pyplot as plt

    from .tables import throughput_source

    df = pd.DataFrame(sweep["points"])
    df = df.drop(columns=["timing", "flags"], errors="ignore")  # the details stay in points.json
    df["trusted"] = df["trusted"].fillna(True).astype(bool) if "trusted" in df else True  # older sweeps: no checks
    figure, ax = plt.subplots(figsize=(8.0, 5.6))
    colours = row_colours(list(dict.fromkeys(df.label)))
    labels = []
    for (curve, sub), marker in zip(df.groupby("curve", sort=False), "osD^v<>"):
        sub = sub.sort_values("tokens_per_s")
        colour = colours[sub.label.iloc[0]]
        ax.errorbar(
            sub.tokens_per_s,
            sub.accuracy,
            yerr=SE_BARS * sub.stderr,
            marker=marker,
            capsize=2,
            lw=1.2,
            ms=5,
            label=f"{sub.label.iloc[0]} ({sub.key.iloc[0]})",
            color=colour,
        )
        labels += [(f"{r.value:g}", r.tokens_per_s, r.accuracy, colour) for r in sub.itertuples()]
        bad = sub[~sub.trusted.astype(bool)]
        _hollow(ax, bad.tokens_per_s, bad.accuracy, marker)
    ax.set_xscale("log")
    lo, hi = df.tokens_per_s.min(), df.tokens_per_s.max()
    decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 0
    # plain tick labels (300, not 3x10^2); minor ones only where they have room
    _plain_y(
        ax,
        "x",
        minor=tuple(range(2, 10)) if decades < 0.7 else (2, 3, 5) if decades < 1.5 else (2, 5) if decades < 3 else (),
    )
    ax.set_xlabel("throughput (generated tokens / s)")
    ax.set_ylabel(f"{sweep['task']} accuracy (%)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(
        f"accuracy vs throughput: batch {sweep['batch_size']}, warm-up and loading excluded, {throughput_source(sweep)};"
        f"\n{ERROR_BARS} (lm-eval); point labels: the varied knob's value",
        fontsize=9,
    )
    if not df.trusted.all():
        ax.text(0.02, 0.02, FLAGGED_NOTE, transform=ax.transAxes, fontsize=7, color="firebrick", va="bottom")
    figure.tight_layout()
    place_labels(ax, labels, fontsize=7.5)
    return figure, df


def place_labels(ax, labels, fontsize=6.5) -> None:
    """Annotate points ``(text, x, y, colour)`` without overlaps: each label takes the first of a ring of offsets
    around its point whose box meets no label placed before it (nor leaves the axes)."""
    figure = ax.figure
    renderer = figure.canvas.get_renderer()
    merged = []  # points of one colour on the same spot (within 6 px) share one label: "0.9, 0.99"
    for text, x, y, colour in labels:
        px = ax.transData.transform((x, y))
        for m in merged:
            if m[3] == colour and abs(m[4][0] - px[0]) < 6 and abs(m[4][1] - px[1]) < 6:
                m[0] = f"{m[0]}, {text}"
                break
        else:
            merged.append([text, x, y, colour, px])
    labels = [tuple(m[:4]) for m in merged]
    offsets = [
        (4, 4),
        (4, -10),
        (-6, 6),
        (-6, -12),
        (6, 12),
        (6, -18),
        (-8, 14),
        (-8, -20),
        (10, 20),
        (10, -26),
        (-10, 22),
        (-10, -28),
        (4, 28),
        (4, -34),
    ]
    placed, frame = [], ax.get_window_extent(renderer)
    for text, x, y, colour in labels:
        for dx, dy in offsets:
            ann = ax.annotate(
                text,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=fontsize,
                color=colour,
                ha="left" if dx >= 0 else "right",
            )
            box = ann.get_window_extent(renderer)
            if (
                not any(box.overlaps(b) for b in placed)
                and frame.contains(box.x0, box.y0)
                and frame.contains(box.x1, box.y1)
            ):
                placed.append(box)
                break
            ann.remove()
        else:  # every offset taken: the first one, overlapping
            ann = ax.annotate(
                text, (x, y), xytext=offsets[0], textcoords="offset points", fontsize=fontsize, color=colour
            )
            placed.append(ann.get_window_extent(renderer))


MAP_STYLE = {  # one colour and marker per rule, the same in every panel (colour: the energy; marker: the selection)
    "ind": ("tab:blue", "o", "-"),
    "ind_resample": ("tab:blue", "s", "--"),
    "inv": ("tab:orange", "o", "-"),
    "inv_resample": ("tab:orange", "s", "--"),
    "uni": ("tab:red", "o", "-"),
    "uni_resample": ("tab:red", "s", "--"),
    "rerank": ("tab:green", "D", "-"),
    "apd": ("tab:purple", "^", ":"),
}


def map_figure(jobs: list[dict]):
    """The map (beyond the paper): one panel per backbone (rows) and window ``w`` (columns); x: a rule's judgement
    (the pairwise AUC of its energy over the window's candidates, :mod:`unie.eval.room`), y: its paired change of the
    average accuracy against the backbone, error bars ±1 s.e. on both; one colour per rule, one marker per candidate
    draw, each proxy a point and the continuum from the paper's-ratio proxy to the oracle a line; the draws' ceilings
    (the best any selection among the candidates reaches) as ticks on the right edge.  Returns ``(figure, frame)``
    (the frame: :func:`unie.report.tables.map_frame`)."""
    import matplotlib.pyplot as plt

    from .tables import map_frame

    df = map_frame(jobs)
    cells = df[df.rule.isin(["ind", "inv", "uni", "rerank"])]
    backbones = list(dict.fromkeys(cells.backbone))
    windows = sorted(dict.fromkeys(cells.w))
    draws = list(dict.fromkeys(cells.draw))
    markers = dict(zip(draws, "os^Dv"))
    cont = next((j.get("continuum") for j in jobs if j.get("continuum")), {}) or {}
    chain = [cont.get("proxy"), *[f"mix{int(round(100 * x)):02d}" for x in cont.get("lambdas", [])], "oracle"]
    figure, axes = plt.subplots(
        len(backbones),
        len(windows),
        figsize=(4.6 * len(windows), 3.8 * len(backbones)),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    for i, b in enumerate(backbones):
        for j, w in enumerate(windows):
            ax = axes[i][j]
            sub = cells[(cells.backbone == b) & (cells.w == w)]
            for rule in dict.fromkeys(sub.rule):
                colour = MAP_STYLE.get(rule, ("black", "x", "-"))[0]
                for draw in draws:
                    r = sub[(sub.rule == rule) & (sub.draw == draw)]
                    if r.empty:
                        continue
                    line = r[r.proxy.isin(chain)].assign(k=lambda d: d.proxy.map(chain.index)).sort_values("k")
                    if len(line) > 1:
                        ax.plot(line.auc, line.delta, color=colour, lw=0.9, alpha=0.7)
                    ax.errorbar(
                        r.auc,
                        r.delta,
                        xerr=r.auc_se.fillna(0),
                        yerr=r.se.fillna(0),
                        color=colour,
                        marker=markers[draw],
                        ls="none",
                        ms=4,
                        capsize=1.5,
                        lw=0.8,
                        label=f"{rule}, {draw}" if i == 0 and j == 0 else None,
                    )
            for draw in draws:
                d = sub[sub.draw == draw]
                if not d.empty:
                    ax.plot([1.0], [d.ceiling.iloc[0]], marker=markers[draw], color="black", ms=6, clip_on=False)
            ax.axhline(0, color="black", lw=0.8)
            ax.axvline(0.5, color="grey", lw=0.6, ls=":")
            ax.grid(alpha=0.3)
            lab = sub.backbone_label.iloc[0] if len(sub) else b
            avg = sub.backbone_avg.iloc[0] if len(sub) else float("nan")
            ax.set_title(f"{lab} ({avg:.1f} %), w = {w:g}", fontsize=9)
            if j == 0:
                ax.set_ylabel("change of the average accuracy\n(points, ±1 s.e. paired)", fontsize=8)
            if i == len(backbones) - 1:
                ax.set_xlabel("judgement: pairwise AUC of the rule's energy (±1 s.e.)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(6, max(1, len(labels))), fontsize=7, frameon=False)
    figure.suptitle(
        "When does Uni-E help a DLLM? Each rule's change against the backbone vs its judgement; lines: the "
        "continuum from the paper's-ratio proxy to the oracle; black marks at AUC 1: each draw's ceiling",
        fontsize=9,
    )
    figure.tight_layout(rect=(0, 0.08, 1, 0.96))
    return figure, df
