"""Rule dllm_local_tasks: the paper profile's benchmarks that lm-eval lacks or cannot run offline (LiveCodeBench v2,
MBPP) as local tasks."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.task_files import write_local_tasks

    names = write_local_tasks(os.path.dirname(snakemake.output.utils), dict(snakemake.params.local))
    log(f"wrote {names}")
