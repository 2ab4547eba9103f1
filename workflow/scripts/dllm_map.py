"""Rules dllm_map_{job}: the proxy-strength map's points of one backbone (or the proxies decoded alone), one lm-eval
run each (unie.pipeline.dllm_runs.run_map)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.dllm.lmeval import evaluate
    from unie.pipeline.dllm_runs import run_map

    tasks_dir = os.path.dirname(snakemake.input.tasks[0])
    run_map(snakemake.params.job, snakemake.params.dllm, snakemake.params.models, tasks_dir,
            os.path.dirname(snakemake.output[0]), snakemake.params.device, evaluate, log=log,
            precision=job_precision(snakemake))
