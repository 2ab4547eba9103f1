"""Rule table_app_sweep: an appendix k/w table from its sweep's lm-eval results."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.report import sweep_table

    log(sweep_table(snakemake.input[0], snakemake.params.caption, snakemake.output.tex, snakemake.output.csv))
