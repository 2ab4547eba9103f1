"""Rules dllm_sweep / dllm_sweeps: the points of one sweep (Figure 4, appendix k/w tables) or of every sweep (one
after the other), one lm-eval run each; each sweep's output is its points.json, its points' lm-eval files beside it
(unie.pipeline.dllm_runs.run_sweeps)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.dllm_runs import run_sweeps

    run_sweeps(
        snakemake.params.sweeps,
        snakemake.params.dllm,
        list(snakemake.output),  # in the sweeps' order
        snakemake.params.device,
        log=log,
        precision=job_precision(snakemake),
    )
