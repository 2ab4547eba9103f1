"""Rules dllm_sweep / dllm_sweeps: the points of one sweep (Figure 4, appendix k/w tables) or of every sweep (one
after the other), one lm-eval run each; each sweep's output is its points.json, its points' lm-eval files beside it."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.dllm.lmeval import evaluate
    from unie.pipeline.dllm_runs import run_sweep

    import shutil

    for (sweep, inputs), points in zip(snakemake.params.sweeps.items(), snakemake.output):  # in the sweeps' order
        out = os.path.dirname(points)  # the sweep's folder: points.json and one folder of lm-eval files per point
        for entry in os.listdir(out) if os.path.isdir(out) else []:  # an earlier run's points: not mixed in
            path = os.path.join(out, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        os.makedirs(out, exist_ok=True)
        run_sweep(sweep, snakemake.params.dllm, inputs, out, snakemake.params.device, evaluate, log=log,
                  precision=job_precision(snakemake))
