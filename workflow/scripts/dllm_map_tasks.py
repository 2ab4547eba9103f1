"""Rule dllm_map_tasks: the map's own toy tasks (more test items than Table 3's, its first ones Table 3's; no
training split), as local lm-eval tasks (unie.pipeline.task_files.write_lmeval_tasks)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.task_files import write_lmeval_tasks

    p = snakemake.params
    names = write_lmeval_tasks(os.path.dirname(snakemake.output.utils), None, p.n_test, p.seed, names=p.names)
    log(f"wrote {names}: {p.n_test} test items each (seed {p.seed})")
