"""Rule dllm_sweep: the throughput of one sweep's points (Figure 4, appendix k/w tables) after their lm-eval runs (rule
dllm_sweep_eval): each scored pass's own, or timed again holding every core (dllm.timing.source); the sweep's
points.json (unie.pipeline.dllm_runs.time_sweep)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.dllm_runs import time_sweep

    time_sweep(
        snakemake.wildcards.sweep,
        snakemake.params.dllm,
        snakemake.params.inputs,
        os.path.dirname(snakemake.output[0]),  # the sweep's folder
        snakemake.params.device,
        log=log,
        precision=job_precision(snakemake),
    )
