"""Rule table1_ppl: Table 1 (perplexity per domain) as LaTeX and CSV from results/ppl/*.json."""

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.report.tables import table1

    table1(dict(snakemake.params.rows), list(snakemake.params.domains), list(snakemake.input.ppl),
           snakemake.output.tex, snakemake.output.csv)
    log(open(snakemake.output.tex).read())
