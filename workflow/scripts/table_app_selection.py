"""Rule table_app_selection: Algorithm 3 under each selection rule, per backbone and energy (beyond the paper)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import selection_table

    p, inp = snakemake.params, snakemake.input
    log(
        selection_table(
            dict(p.rows),
            dict(p.tasks),
            list(inp.results),
            list(inp.effects),
            snakemake.output.tex,
            snakemake.output.csv,
            list(inp.rooms),
        )
    )
