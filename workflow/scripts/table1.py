"""Rule table1: Table 1 (perplexity per domain) as LaTeX and CSV from results/ppl/*.json."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import table1

    log(
        table1(
            dict(snakemake.params.rows),
            list(snakemake.params.domains),
            list(snakemake.input.ppl),
            snakemake.output.tex,
            snakemake.output.csv,
        )
    )
