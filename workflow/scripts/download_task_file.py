"""Rule download_task_file: one release file of a local paper task (e.g. LiveCodeBench's ``test2.jsonl``) from
its Hugging Face dataset repository (a localrule: the submit host; from ``HF_HOME``'s cache when the hub does not
answer, :func:`unie.data.hub.fetch_dataset_file`)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.data.hub import fetch_dataset_file

    p = snakemake.params
    out = fetch_dataset_file(p.repo, snakemake.wildcards.file, snakemake.output[0], revision=p.revision)
    log(f"{p.repo}@{p.revision or 'main'}/{snakemake.wildcards.file} -> {out} ({os.path.getsize(out)} bytes)")
