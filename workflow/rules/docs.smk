# docs/results.md: every regenerated table as Markdown (`snakemake --cores 1 docs`), written to
# results/docs/results.md; a published run's copy is committed as docs/results.md.  What the numbers show is written
# by hand in docs/findings.md.  Not part of `all`.


def docs_results_inputs(wc):
    tables = [f for f in final_outputs() if f.endswith((".csv", ".json", ".md"))]
    if config.get("dllm", {}).get("map"):
        tables.append("results/tables/table_app_map.csv")  # the proxy-strength map (not in `all`, its own target)
    if config.get("figures", {}).get("fig2_ablation"):
        tables.append("results/figures/fig2_ablation.csv")  # written beside the figure, not a target of `all`
    timing = []
    if config.get("figures", {}).get("fig3_tradeoff"):
        timing = [f"results/timing/{r}.json" for r in dict.fromkeys(fig3_runs(config)["tradeoff"].values())]
    return {"tables": tables, "timing": timing}


rule docs:
    input:
        unpack(docs_results_inputs),
    output:
        md="results/docs/results.md",
    log:
        "logs/docs/results.log",
    params:
        note=lambda wc: f"Profile `{config['profile']}`, seed {config['seed']}, device `{config['device']}`.",
    localrule: True
    script:
        "../scripts/docs_results.py"

