"""Rules dllm_map_tree_{backbone}: one candidate tree of a backbone's map, a draw and a window
(unie.pipeline.map_runs.run_map_tree)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.map_runs import run_map_tree

    run_map_tree(
        snakemake.params.job,
        snakemake.wildcards.tree,
        snakemake.params.dllm,
        snakemake.params.models,
        os.path.dirname(snakemake.input.tasks[0]),
        os.path.dirname(snakemake.input.lmeval),
        snakemake.params.device,
        log=log,
        precision=job_precision(snakemake),
    )
