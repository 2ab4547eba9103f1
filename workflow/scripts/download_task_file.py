"""Rule download_task_file: one release file of a local paper task (e.g. LiveCodeBench's ``test2.jsonl``) from
its Hugging Face dataset repository (a localrule: the submit host; from ``HF_HOME``'s cache when the hub does not
answer; unie.pipeline.task_files.download_task_file)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.task_files import download_task_file

    p = snakemake.params
    download_task_file(p.repo, snakemake.wildcards.file, snakemake.output[0], revision=p.revision, log=log)
