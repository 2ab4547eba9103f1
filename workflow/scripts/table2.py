"""Rule table2: Table 2 (Gen PPL per step count and evaluator, entropy) from results/genppl/."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import table2

    p = snakemake.params
    log(
        table2(
            dict(p.rows),
            dict(p.runs),
            dict(p.evaluators),
            list(snakemake.input.genppl),
            snakemake.output.tex,
            snakemake.output.csv,
            p.train_domain,
            p.seq_len,
            log=log,
        )
    )
