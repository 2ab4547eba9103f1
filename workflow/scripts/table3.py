"""Rule table3_dllm: Table 3 (accuracy per benchmark, deltas to the backbone) from lm-eval's result JSONs."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.report import table3

    p = snakemake.params
    log(table3(dict(p.rows), dict(p.tasks), list(snakemake.input.results), snakemake.output.tex,
               snakemake.output.csv))
