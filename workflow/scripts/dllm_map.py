"""Rules dllm_map_{job}: the lm-eval points of the map of one backbone (its own decode, APD per proxy; its trees are
jobs of their own) or the proxies decoded alone (unie.pipeline.map_runs.run_map)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.map_runs import run_map

    run_map(
        snakemake.params.job,
        snakemake.params.dllm,
        snakemake.params.models,
        os.path.dirname(snakemake.input.tasks[0]),
        os.path.dirname(snakemake.output[0]),
        snakemake.params.device,
        log=log,
        precision=job_precision(snakemake),
    )
