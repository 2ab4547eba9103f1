"""Rules dllm_room_{backbone}: the candidate tree of Algorithm 3's window on Table 3's items (unie.pipeline.room_runs)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.room_runs import run_room

    p = snakemake.params
    rows_dir = os.path.dirname(os.path.dirname(snakemake.input[f"{p.backbone}_results"]))
    row_dirs = {n: os.path.join(rows_dir, n) for n in [p.backbone, *p.rows]}
    tasks_dir = os.path.dirname(snakemake.input[f"{p.backbone}_tasks"][0])
    run_room(
        p.backbone,
        dict(p.rows),
        dict(p.dllm),
        dict(p.inputs),
        row_dirs,
        tasks_dir,
        snakemake.output[0],
        p.device,
        p.dllm["room"]["cap"],
        log=log,
        precision=job_precision(snakemake),
    )
