"""Rule table2_genppl: Table 2 (Gen PPL per step count and evaluator, entropy) from results/genppl/."""

from unie.workflow import job

with job(snakemake) as log:
    from unie.tables import table2

    table2(dict(snakemake.params.rows), dict(snakemake.params.runs), dict(snakemake.params.evaluators),
           list(snakemake.input.genppl), snakemake.output.tex, snakemake.output.csv)
    log(open(snakemake.output.tex).read())
