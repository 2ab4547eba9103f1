"""Rule dllm_tasks: the seven toy benchmarks as local lm-eval tasks (YAML + JSONL, train and test splits)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.task_files import write_lmeval_tasks

    t = snakemake.params.tasks
    names = write_lmeval_tasks(os.path.dirname(snakemake.output.utils), t["n_train"], t["n_test"], t["seed"])
    if list(names) != list(t["names"]):
        raise ValueError(f"dllm.tasks.names must be {names} (in this order), got {t['names']}")
    log(f"wrote {names}")
