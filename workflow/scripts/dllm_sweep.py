"""Rules dllm_sweep / dllm_sweeps: the points of one sweep (Figure 4, appendix k/w tables) or of every sweep (one
after the other), one lm-eval run each; each sweep's output is its points.json, its points' lm-eval files beside it."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.dllm.lmeval import evaluate
    from unie.dllm.rows import sweep_points
    from unie.pipeline.dllm_runs import run_sweep

    import shutil

    for (sweep, inputs), points in zip(snakemake.params.sweeps.items(), snakemake.output):  # in the sweeps' order
        out = os.path.dirname(points)  # the sweep's folder: points.json and one folder of lm-eval files per point
        # what is not a point of this sweep goes; a point finished by an earlier attempt of this job is kept, and
        # reused only where its record says it was made as it would be now (run_sweep)
        names = {p["name"] for p in sweep_points(snakemake.params.dllm, sweep)}
        for entry in os.listdir(out) if os.path.isdir(out) else []:
            path = os.path.join(out, entry)
            if entry not in names:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        os.makedirs(out, exist_ok=True)
        run_sweep(
            sweep,
            snakemake.params.dllm,
            inputs,
            out,
            snakemake.params.device,
            evaluate,
            log=log,
            precision=job_precision(snakemake),
        )
