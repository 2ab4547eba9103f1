"""The workflow's named targets, in one place: the README's "Targets" table, the rule names of the Snakefile and
workflow/rules/*.smk, and the sections of ``snakemake --report`` are checked against this table
(tests/test_targets.py).

Each ``output`` is relative to the run's directory (``runs/<name>/``, :mod:`unie.config.rundir`): the default
profile's Table 1 is ``runs/toy/results/tables/table1_ppl.tex``.

Every name but ``all`` is the rule that writes the files, so ``snakemake --cores 2 -f NAME`` reruns that rule
(Snakemake's ``-f`` forces the job of a target rule, never its inputs: an alias rule with only inputs would rerun
nothing).  ``all`` is the default target (every table and figure of the profile except ``bench``); to rewrite
every table and figure from the existing results, force their rules:
``snakemake --cores 2 -f $(python -m unie.config.targets)`` (the default profile's; ``--profile paper`` for the
paper profile's).

``report``: the section of ``snakemake --report report.html`` (category, subcategory) and the caption file in
workflow/report/ (``{name}.rst``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    output: str  # the main file (the rule writes the others beside it)
    what: str  # one line, for the README's table and `unie targets --long`
    category: str | None = None  # the report's category; None: not in the report (`all`)
    subcategory: str | None = None
    profiles: str = "both"  # "toy": only the default profile (toy world) writes it
    beside: str | None = None  # its files are beside the run's directory, in `runs/<name><beside>/` (replicates)

    @property
    def caption(self) -> str:
        return f"workflow/report/{self.name}.rst"


PAGE, MAIN_TABLES, MAIN_FIGURES, APPENDIX, COMPARE, BENCH = (
    "0. Read here: every table and figure",
    "1. Tables (main text)",
    "2. Figures (main text)",
    "3. Appendix",
    "4. Paper vs ours",
    "5. Sampler benchmark",
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "all", "results/tables/paper_vs_ours.md", "the default target: every table and figure below except `bench`"
        ),
        Target(
            "table1",
            "results/tables/table1_ppl.tex",
            "Table 1: perplexity on the test split of 8 domains",
            MAIN_TABLES,
            "Table 1: perplexity",
        ),
        Target(
            "table2",
            "results/tables/table2_genppl.tex",
            "Table 2: generative perplexity and entropy vs sampling steps",
            MAIN_TABLES,
            "Table 2: generative perplexity",
        ),
        Target(
            "table3",
            "results/tables/table3_dllm.tex",
            "Table 3: DLLM benchmark accuracy (lm-eval)",
            MAIN_TABLES,
            "Table 3: DLLM benchmarks",
        ),
        Target(
            "fig2",
            "results/figures/fig2_ablation.png",
            "Figure 2: energy ablation (Gen PPL vs steps)",
            MAIN_FIGURES,
            "Figure 2: energy ablation",
        ),
        Target(
            "fig3",
            "results/figures/fig3_tradeoff.png",
            "Figure 3: k and w sweeps, quality vs wall-clock",
            MAIN_FIGURES,
            "Figure 3: k, w and wall-clock",
        ),
        Target(
            "fig4",
            "results/figures/fig4_dllm_tradeoff.png",
            "Figure 4: DLLM accuracy vs throughput",
            MAIN_FIGURES,
            "Figure 4: DLLM accuracy vs throughput",
        ),
        Target(
            "cases",
            "results/figures/case_non_independent.png",
            "the four appendix case studies (toy profile)",
            APPENDIX,
            "Case studies",
            profiles="toy",
        ),
        Target(
            "partition_check",
            "results/tables/partition_check.tex",
            "brute-force check of the closed-form partition function (toy profile)",
            APPENDIX,
            "Partition function check",
            profiles="toy",
        ),
        Target(
            "table_app_dllm_full",
            "results/tables/table_app_dllm_full.tex",
            "appendix: the full DLLM benchmark table",
            APPENDIX,
            "Full DLLM benchmark table",
        ),
        Target(
            "table_app_selection",
            "results/tables/table_app_selection.tex",
            "appendix (beyond the paper): Algorithm 3's selection rules argmin / resample / proxy_rerank",
            APPENDIX,
            "Selection rules",
        ),
        Target(
            "table_app_k",
            "results/tables/table_app_k.tex",
            "appendix: Uni-Energy's candidate size k (accuracy, throughput)",
            APPENDIX,
            "Candidate size k",
        ),
        Target(
            "table_app_w",
            "results/tables/table_app_w.tex",
            "appendix: Uni-Energy's window w (accuracy, throughput)",
            APPENDIX,
            "Window w",
        ),
        Target(
            "table_app_map",
            "results/tables/table_app_map.tex",
            "beyond the paper: when Uni-E helps a DLLM, by proxy strength (weak to an oracle) and candidate "
            "temperature (not in `all`; ≤ 20 min on the slow machine)",
            APPENDIX,
            "When Uni-E helps",
            profiles="toy",
        ),
        Target(
            "fig_app_map",
            "results/figures/fig_app_map.png",
            "beyond the paper: the same map as a figure (not in `all`)",
            APPENDIX,
            "When Uni-E helps",
            profiles="toy",
        ),
        Target(
            "paper_vs_ours",
            "results/tables/paper_vs_ours.md",
            "the paper's numbers beside ours",
            COMPARE,
            "Every table",
        ),
        Target(
            "bench",
            "results/bench/sampler.md",
            "the sampler benchmark, and training from the Parquet token file (not part of `all`)",
            BENCH,
            "Algorithm 2, Uni-E vs AR, training",
        ),
        Target(
            "bench_paper_scale",
            "results/bench/paper_scale/paper_scale.md",
            "C_DLM, C_AR, Algorithm 2 and the AR at GPT-2-small size, random weights, fp32/TF32/bf16 (not in `all`)",
            BENCH,
            "Paper scale, random weights",
        ),
        Target(
            "prefetch",
            "resources/prefetch/report.md",
            "on the submit host: every model, tokenizer, dataset and lm-eval task dataset `all` downloads, then opened "
            "offline; lists the checkpoints to place by hand (not part of `all`)",
        ),
        Target(
            "replicates",
            "replicates.md",
            "the whole run for seeds 0, 1, 2 (three trainings of every model, each in its own run directory), then every "
            "table's cells as mean and spread over them and which claims hold in each (not in `all`; ≈ 3 runs' time)",
            beside="+replicates",
        ),
        Target(
            "paper_page",
            "results/report/paper.html",
            "every table and figure of the run on one HTML page, captions visible (the landing page of "
            "`snakemake --report`)",
            PAGE,
            "The paper on one page",
        ),
        Target(
            "docs",
            "results/docs/results.md",
            "every table as Markdown, generated (not part of `all`; `docs/results.md` is a copy from a default run)",
        ),
    ]
}

# the rules `snakemake -f` reruns to rewrite every table and figure of `all` from the existing results
OUTSIDE_ALL = (
    "all",
    "bench",
    "bench_paper_scale",
    "prefetch",
    "docs",
    "table_app_map",
    "fig_app_map",
    "replicates",
)  # own budgets
RULES = [name for name in TARGETS if name not in OUTSIDE_ALL]


# what a finished run points its user to (the Snakefile's `onsuccess:`), in this order
MAIN_OUTPUTS = (
    ("results/report/paper.html", "every table and figure on one page, captions visible (open it in a browser)"),
    ("results/tables/paper_vs_ours.md", "the paper's numbers beside ours, with the orderings compared"),
)


def run_summary(root=".", run_dir: str = ".") -> str:
    """The lines a successful run ends with: the main outputs it has (:data:`MAIN_OUTPUTS`, in the run's directory
    ``run_dir`` below ``root``), how many tables and figures, and the next commands (the report, the docs page, the
    notebook).  Only files that exist are named."""
    import os
    from pathlib import Path

    at = lambda f: os.path.normpath(os.path.join(run_dir, f))  # noqa: E731  (as the user types it)
    base = Path(root) / run_dir
    have = [(at(f), what) for f, what in MAIN_OUTPUTS if (base / f).exists()]
    tables = sorted((base / "results" / "tables").glob("*.tex"))
    figures = sorted((base / "results" / "figures").glob("*.png"))
    if not have and not tables and not figures:
        return "unie: done (no table or figure yet: `snakemake --cores 2` makes them all)."
    width = max((len(f) for f, _ in have), default=0)
    lines = [f"unie: done. Read (this run's directory: {at('.')}/):"] + [
        f"  {f.ljust(width)}  {what}" for f, what in have
    ]
    lines.append(
        f"  {len(tables)} tables in {at('results/tables')}/ (.tex, .csv), {len(figures)} figures in "
        f"{at('results/figures')}/ (.pdf, .png)"
    )
    notebook = "" if os.path.normpath(run_dir) in (".", "runs/toy") else f"UNIE_RUN={at('.')} "
    lines.append(
        "Next: `snakemake --report report.html` (one HTML file: this page, every file with its caption), "
        f"`snakemake --cores 2 docs` (every table as Markdown: {at('results/docs/results.md')}), "
        f"`{notebook}jupyter lab notebooks/results.ipynb`."
    )
    return "\n".join(lines)


def report_args(name: str, basedir: str = "..") -> dict:
    """The keyword arguments of Snakemake's ``report()`` for target ``name``'s files: the caption (a path
    relative to workflow/rules/, where the rules are defined), the category and the subcategory."""
    t = TARGETS[name]
    return {"caption": f"{basedir}/report/{t.name}.rst", "category": t.category, "subcategory": t.subcategory}


def readme_table() -> str:
    """The README's "Targets" table (markdown), generated from TARGETS."""
    rows = ["| target | main file (in the run's directory, e.g. `runs/toy/`) | what |", "|---|---|---|"]
    rows += [
        f"| `{t.name}` | `{t.output}`" + (f" (in `runs/toy{t.beside}/`)" if t.beside else "") + f" | {t.what} |"
        for t in TARGETS.values()
    ]
    return "\n".join(rows)


def rules_of(profile: str = "toy") -> list[str]:
    """The target rules of ``all`` in a profile ("toy": the default profile, "paper")."""
    return [n for n in RULES if profile == "toy" or TARGETS[n].profiles == "both"]


if __name__ == "__main__":  # python -m unie.config.targets [--profile paper]: the rule names, for snakemake -f
    import argparse

    p = argparse.ArgumentParser(prog="python -m unie.config.targets", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=["toy", "paper"], default="toy")
    p.add_argument("--readme", action="store_true", help="print the README's Targets table instead")
    args = p.parse_args()
    print(readme_table() if args.readme else " ".join(rules_of(args.profile)))
