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
