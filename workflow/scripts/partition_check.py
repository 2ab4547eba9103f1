"""Rule partition_check: enumerate the Uni-E partition function on V=3, L=4 (see unie.energy.partition)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import partition_check

    log(partition_check(snakemake.output.tex, snakemake.output.csv).to_string())
