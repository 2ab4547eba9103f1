"""Rule replicates: the aggregate page of the seeds' runs (unie.pipeline.replicate_runs.aggregate_replicates)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.replicate_runs import aggregate_replicates

    aggregate_replicates(list(snakemake.input), os.path.dirname(snakemake.output[0]), log=log)
