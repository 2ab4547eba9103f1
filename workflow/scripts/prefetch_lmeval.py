"""Rule prefetch_lmeval: lm-eval's built-in tasks of Table 3 and the sweeps, each loaded once on the submit host, so
that its dataset is in HF_HOME for the dllm_eval jobs (unie.pipeline.prefetch.fetch_lmeval_tasks)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.prefetch import fetch_lmeval_tasks

    fetch_lmeval_tasks(snakemake.params.tasks, snakemake.output[0], log=log)
