"""Figures from the workflow's result records (never from hand-typed numbers).

Each function takes parsed result JSONs (which carry their identity) and returns the matplotlib figure
and the ``DataFrame`` of the plotted points; the pipeline writes the PDF/PNG/CSV files.
"""

from __future__ import annotations

import pandas as pd

CONTEXT_TITLES = {"teacher_forced": "AR context: teacher forced", "masked": "AR context: masked state",
                  "exact": r"AR context: exact $\pi$ (oracle)"}


def genppl_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (run, steps, evaluator) of Gen PPL result records."""
    rows = []
    for r in records:
        for ev, g in r["genppl"].items():
            rows.append({"run": r["sampling"]["run"], "steps": int(r["sampling"]["steps"]), "evaluator": ev,
                         "genppl": g["ppl"], "nll_se": g["nll_se"], "nll": g["nll_per_token"],
                         "entropy_bits": r["entropy_bits"], "seconds": r["sampling"].get("seconds")})
    return pd.DataFrame(rows)


def fig2_ablation(fig: dict, records: list[dict]):
    """Gen PPL vs steps for no energy, Inv-E only, Ind-E only and Uni-E; one panel per ``ar_context``.

    ``fig`` is ``config['figures']['fig2_ablation']`` plus ``runs``: context -> energy -> the sampling run of
    that curve (:func:`unie.pipeline.checks.fig2_runs`); ``records`` the Gen PPL results of its runs.
    Error bars: ±2 s.e. of the pooled NLL, mapped to perplexity.  Returns ``(figure, points)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    df = genppl_frame(records)
    df = df[df.evaluator == fig["evaluator"]]
    contexts = fig["contexts"]
    curves = {"No energy": lambda ctx: fig["baseline"]}
    for label, energy in fig["energies"].items():
        curves[label] = lambda ctx, e=energy: fig["runs"][ctx][e]
    out = []
    figure, axes = plt.subplots(1, len(contexts), figsize=(4.2 * len(contexts), 3.4), sharey=True, squeeze=False)
    for ax, ctx in zip(axes[0], contexts):
        for (label, run_of), marker in zip(curves.items(), "osD^v"):
            sub = df[df.run == run_of(ctx)].sort_values("steps")
            if sub.empty:
                continue
            lo = np.exp(sub.nll - 2 * sub.nll_se)
            hi = np.exp(sub.nll + 2 * sub.nll_se)
            ax.errorbar(sub.steps, sub.genppl, yerr=[sub.genppl - lo, hi - sub.genppl], marker=marker, capsize=2,
                        label=label, lw=1.2, ms=4)
            out += [{"context": ctx, "curve": label, "run": run_of(ctx), "steps": s, "genppl": g}
                    for s, g in zip(sub.steps, sub.genppl)]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sampling steps")
        ax.set_title(CONTEXT_TITLES.get(ctx, ctx), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(f"Gen PPL ({fig['evaluator']})")
    axes[0][-1].legend(fontsize=8)
    figure.suptitle(f"Ablation (K={fig['K']}, w={fig['w']})", fontsize=10)
    figure.tight_layout()
    return figure, pd.DataFrame(out)


def _timing_frame(timings: list[dict]) -> pd.DataFrame:
    rows = [{"run": t["run"], "steps": int(p["steps"]), "seconds": p["seconds"], "batch_size": p["batch_size"],
             "threads": t["threads"], "device_name": t["device_name"]} for t in timings for p in t["points"]]
    return pd.DataFrame(rows)


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
        out["k"][str(K)] = {str(s): {"dnll": nll[(run, s)][0] - nll[(base, s)][0],
                                     "se": (nll[(run, s)][1] ** 2 + nll[(base, s)][1] ** 2) ** 0.5,
                                     "genppl": nll[(run, s)][2]} for s in steps if (run, s) in nll and (base, s) in nll}
    full = runs["w"][max(runs["w"])]
    for w, run in runs["w"].items():
        pts = {}
        for s in steps:
            if (run, s) in nll and (base, s) in nll and (full, s) in nll:
                gain_full = nll[(base, s)][0] - nll[(full, s)][0]
                se_full = (nll[(base, s)][1] ** 2 + nll[(full, s)][1] ** 2) ** 0.5
                gain = nll[(base, s)][0] - nll[(run, s)][0]
                pts[str(s)] = {"gain": gain, "se": (nll[(base, s)][1] ** 2 + nll[(run, s)][1] ** 2) ** 0.5,
                               "gain_full": gain_full, "se_full": se_full,
                               # a share of a gain that is not there (< 2 s.e.) would be noise
                               "kept": gain / gain_full if gain_full > 2 * se_full else None,
                               "genppl": nll[(run, s)][2]}
        out["w"][str(w)] = pts
    ar_run = fig["baselines"].get("AR")
    if ar_run is not None and not times.empty:
        ar = df[df.run == ar_run]
        ar_t = times[times.run == ar_run]
        if len(ar) and len(ar_t):
            ar_ppl, ar_sec = float(ar.genppl.iloc[0]), float(ar_t.seconds.iloc[0])
            out["ar"] = {"genppl": ar_ppl, "seconds": ar_sec}
            for label, run in runs["tradeoff"].items():
                if run == ar_run:
                    continue
                sub = df[df.run == run].merge(times[times.run == run][["steps", "seconds"]], on="steps")
                sub = sub.sort_values("steps")
                hit = sub[sub.genppl <= ar_ppl]
                first = hit.iloc[0] if len(hit) else None
                out["wallclock"][label] = {
                    "run": run, "steps": None if first is None else int(first.steps),
                    "genppl": None if first is None else float(first.genppl),
                    "seconds": None if first is None else float(first.seconds),
                    "ratio_to_ar": None if first is None else float(first.seconds) / ar_sec,
                    "best_genppl": float(sub.genppl.min()) if len(sub) else None}
    return out


def fig3_tradeoff(fig: dict, records: list[dict], timings: list[dict]):
    """Figure 3, four panels: Gen PPL vs steps for each candidate size K (at w); for each window w (at K); Gen PPL
    and entropy vs the wall-clock of one batch (rule ``timing``) for the baselines, EDLM-AR and Uni-EDLM-AR.

    ``fig``: ``config['figures']['fig3_tradeoff']`` plus ``runs`` (:func:`unie.pipeline.checks.fig3_runs`).
    Error bars: ±2 s.e. of the pooled NLL mapped to perplexity.  Returns ``(figure, points, summary)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401
    import numpy as np

    df = genppl_frame(records)
    df = df[df.evaluator == fig["evaluator"]].drop(columns="seconds")
    times = _timing_frame(timings)
    runs = fig["runs"]
    figure, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    out = []

    def curve(ax, sub, x, y, label, marker, err=True):
        sub = sub.sort_values("steps")
        if sub.empty:
            return
        if err and y == "genppl":
            lo, hi = np.exp(sub.nll - 2 * sub.nll_se), np.exp(sub.nll + 2 * sub.nll_se)
            ax.errorbar(sub[x], sub[y], yerr=[sub[y] - lo, hi - sub[y]], marker=marker, capsize=2, label=label, lw=1.2,
                        ms=4)
        else:
            ax.plot(sub[x], sub[y], marker=marker, label=label, lw=1.2, ms=4)

    for (K, run), marker in zip(runs["k"].items(), "osD^v<>"):
        sub = df[df.run == run]
        curve(axes[0], sub, "steps", "genppl", f"k={K}", marker)
        out += [{"panel": "k", "curve": f"k={K}", "run": run, "steps": r.steps, "genppl": r.genppl, "nll": r.nll,
                 "nll_se": r.nll_se, "entropy_bits": r.entropy_bits} for r in sub.itertuples()]
    for (w, run), marker in zip(runs["w"].items(), "osD^v<>"):
        sub = df[df.run == run]
        curve(axes[1], sub, "steps", "genppl", f"w={w}", marker)
        out += [{"panel": "w", "curve": f"w={w}", "run": run, "steps": r.steps, "genppl": r.genppl, "nll": r.nll,
                 "nll_se": r.nll_se, "entropy_bits": r.entropy_bits} for r in sub.itertuples()]
    for (label, run), marker in zip(runs["tradeoff"].items(), "osD^v<>"):
        sub = df[df.run == run].merge(times[times.run == run][["steps", "seconds"]], on="steps")
        curve(axes[2], sub, "seconds", "genppl", label, marker)
        curve(axes[3], sub, "seconds", "entropy_bits", label, marker, err=False)
        out += [{"panel": "tradeoff", "curve": label, "run": run, "steps": r.steps, "genppl": r.genppl, "nll": r.nll,
                 "nll_se": r.nll_se, "entropy_bits": r.entropy_bits, "seconds": r.seconds} for r in sub.itertuples()]
    for ax in axes[:2]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sampling steps")
    for ax in axes[2:]:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("wall-clock per batch (s)")
    for ax in axes[:3]:
        ax.set_yscale("log")
        ax.set_ylabel(f"Gen PPL ({fig['evaluator']})")
    axes[3].set_ylabel("entropy (bits)")
    axes[0].set_title(f"candidate size k (w={fig['w']})", fontsize=9)
    axes[1].set_title(f"window w (k={fig['K']})", fontsize=9)
    dev = times.device_name.iloc[0] if not times.empty else "?"
    bs = int(times.batch_size.iloc[0]) if not times.empty else "?"
    th = int(times.threads.iloc[0]) if not times.empty else "?"
    axes[2].set_title(f"Gen PPL vs wall-clock (k={fig['K']}, w={fig['w']})", fontsize=9)
    axes[3].set_title("entropy vs wall-clock", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    figure.suptitle(f"{fig['label']}: hyper-parameters and efficiency. Wall-clock: one batch of {bs}, median of "
                    f"repeats, warm-up excluded, {th} threads, {dev}", fontsize=9)
    figure.tight_layout()
    points = pd.DataFrame(out)
    return figure, points, fig3_summary(fig, df, times)


def case_figure(words: list[str], step, steps: int, title: str, caption: str, marked=()):
    """One case study: the sequence's tokens in reading order (wrapped), each box coloured by the step that
    revealed it (colour bar), the tokens of the error outlined in red; ``caption`` states the selection rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_line = 11
    lines = (len(words) + per_line - 1) // per_line
    figure, ax = plt.subplots(figsize=(11, 0.75 * lines + 1.9))
    cmap = plt.get_cmap("viridis")
    norm = matplotlib.colors.Normalize(vmin=0, vmax=max(1, steps))
    for i, (w, k) in enumerate(zip(words, step)):
        row, col = divmod(i, per_line)
        ax.text(col / per_line + 0.005, 1 - (row + 0.5) / lines, w, fontsize=10, va="center", ha="left",
                color="white" if int(k) < 0.6 * steps else "black",
                bbox={"boxstyle": "round,pad=0.3", "fc": cmap(norm(int(k))),
                      "ec": "red" if i in set(marked) else "none", "lw": 2.0})
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    figure.text(0.01, 0.01, caption, fontsize=7.5, wrap=True, va="bottom")
    bar = figure.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.02, pad=0.01)
    bar.set_label("step that revealed the token", fontsize=8)
    figure.subplots_adjust(bottom=0.38 if lines < 4 else 0.25, top=0.85)
    return figure


def fig4_tradeoff(sweep: dict):
    """Figure 4: accuracy on one task (the MATH500 analogue) vs throughput, one curve per decoder, its
    parallelism knob varied (tokens per step ``m``, or Fast-dLLM's threshold).

    ``sweep``: a ``points.json`` of rule ``dllm_sweep`` (``points``: accuracy, its s.e. from lm-eval,
    tokens/s).  Error bars ±1 s.e.  Returns ``(figure, points)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pd.DataFrame(sweep["points"])
    figure, ax = plt.subplots(figsize=(5.6, 3.8))
    for (curve, sub), marker in zip(df.groupby("curve", sort=False), "osD^v<>"):
        sub = sub.sort_values("tokens_per_s")
        ax.errorbar(sub.tokens_per_s, sub.accuracy, yerr=sub.stderr, marker=marker, capsize=2, lw=1.2, ms=4,
                    label=f"{sub.label.iloc[0]} ({sub.key.iloc[0]})")
        for r in sub.itertuples():
            ax.annotate(str(r.value), (r.tokens_per_s, r.accuracy), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("throughput (generated tokens / s)")
    ax.set_ylabel(f"{sweep['task']} accuracy (%)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title(f"accuracy vs throughput: batch {sweep['batch_size']}, warm-up and loading excluded, "
                 f"±1 s.e.", fontsize=8)
    figure.tight_layout()
    return figure, df
