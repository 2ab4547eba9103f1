"""Rule fig2_ablation: Figure 2 (energy ablation per AR context) from results/genppl/."""

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.report.figures import fig2_ablation

    table = fig2_ablation(dict(snakemake.params.fig), list(snakemake.input.genppl), snakemake.output.pdf,
                          snakemake.output.png, snakemake.output.csv)
    log(table.to_string())
