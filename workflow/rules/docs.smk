# docs/results.md: every regenerated table as Markdown (`snakemake --cores 1 docs`), written to the run's
# results/docs/results.md (runs/toy/results/docs/results.md for the default run), naming the run; a published
# run's copy is committed as docs/results.md.  What the numbers show is written by hand in docs/findings.md.  Not
# part of `all`.


def docs_results_inputs(wc):
    tables = [f for f in final_outputs() if f.endswith((".csv", ".json", ".md"))]
    if config.get("dllm", {}).get("map"):
        tables.append(
            run_path("results/tables/table_app_map.csv")
        )  # the proxy-strength map (not in `all`, its own target)
    if config.get("figures", {}).get("fig2_ablation"):
        tables.append(run_path("results/figures/fig2_ablation.csv"))  # written beside the figure, not a target of `all`
    timing = []
    if config.get("figures", {}).get("fig3_tradeoff"):
        timing = [run_path(f"results/timing/{r}.json") for r in dict.fromkeys(FACTS.fig3_runs["tradeoff"].values())]
    return {"tables": tables, "timing": timing}


rule docs:
    input:
        unpack(docs_results_inputs),
    output:
        md=run_path("results/docs/results.md"),
    log:
        run_path("logs/docs/results.log"),
    localrule: True
    params:
        note=lambda wc: f"The run `{RUN_DIR}/`: profile `{config['profile']}`, seed {config['seed']}, device "
        f"`{config['device']}`.",
    script:
        "../scripts/docs_results.py"


# results/report/paper.html: every table and figure of `all` on one HTML page, in the paper's order, captions visible
# (tables from their .tex, figures from their PNG); the landing page of `snakemake --report report.html`
# (workflow/report/workflow.rst includes it).  Part of `all`.


def page_items():
    """The page's sections: per report target of `all` (unie.config.targets order), its .tex and .png files."""
    made = [f for f in final_outputs() if f.endswith((".tex", ".png"))]
    items = []
    for name, t in TARGETS.items():
        if t.category in (None, TARGETS["paper_page"].category) or name.startswith("bench"):
            continue
        stem = os.path.basename(t.output).rsplit(".", 1)[0]
        files = [
            f
            for f in made
            if os.path.basename(f).rsplit(".", 1)[0] == stem
            or (name == "cases" and os.path.basename(f).startswith("case_"))
        ]
        if files:
            items.append({"target": name, "heading": t.subcategory, "files": files})
    return items


def report_captions():
    """Each target's report caption (workflow/report/{name}.rst) as text: a param, not an input path, so that the
    page does not depend on where the clone is."""
    return {
        item["target"]: open(os.path.join(workflow.basedir, "workflow", "report", f"{item['target']}.rst")).read()
        for item in page_items()
    }


rule paper_page:
    input:
        [f for item in page_items() for f in item["files"]],
    output:
        html=report(run_path("results/report/paper.html"), **REPORT["paper_page"], labels={"file": "HTML (read here)"}),
    log:
        run_path("logs/report/paper_page.log"),
    localrule: True
    params:
        sections=page_items(),
        captions=report_captions(),
        note=f"The run <code>{RUN_DIR}/</code>: profile <code>{config['profile']}</code>, seed {config['seed']}, "
        f"device <code>{config['device']}</code>.",
    script:
        "../scripts/paper_page.py"
