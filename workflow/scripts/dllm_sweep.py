"""Rules dllm_sweep / dllm_sweeps: the points of one sweep (Figure 4, appendix k/w tables) or of every sweep (one
after the other), one lm-eval run each."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.lmeval import evaluate
    from unie.pipeline.dllm import run_sweep

    for (sweep, inputs), out in zip(snakemake.params.sweeps.items(), snakemake.output):  # outputs in sweeps' order
        os.makedirs(out, exist_ok=True)
        run_sweep(sweep, snakemake.params.dllm, inputs, out, snakemake.params.device, evaluate, log=log,
                  precision=job_precision(snakemake))
