"""Rules table3 and table_app_dllm_full: Table 3 and the appendix's full table (accuracy per benchmark,
deltas to the backbone) from lm-eval's result JSONs; the rule's ``rows`` param says which rows."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import table3

    p = snakemake.params
    log(
        table3(
            dict(p.rows),
            dict(p.tasks),
            list(snakemake.input.results),
            snakemake.output.tex,
            snakemake.output.csv,
            list(snakemake.input.effects),
            list(snakemake.input.rooms),
        )
    )
