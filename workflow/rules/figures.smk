# Figures: matplotlib plots generated from result files written by the sampling rules.


def fig2_inputs(wc):
    fig = config["figures"]["fig2_ablation"]
    runs = [fig["baseline"]] + [run for by_energy in fig2_runs(config).values() for run in by_energy.values()]
    files = {"genppl": genppl_targets(runs), "samples": sample_targets(runs)}
    return {**files, "dirs": result_dirs(files["genppl"] + files["samples"])}


rule fig2_ablation:
    input:
        unpack(fig2_inputs),
    output:
        pdf="results/figures/fig2_ablation.pdf",
        png="results/figures/fig2_ablation.png",
        csv="results/figures/fig2_ablation.csv",
    log:
        "logs/figures/fig2_ablation.log",
    params:
        fig=dict(config.get("figures", {}).get("fig2_ablation") or {}, runs=fig2_runs(config)),
    localrule: True
    script:
        "../scripts/fig2.py"
