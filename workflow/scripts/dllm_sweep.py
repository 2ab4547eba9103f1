"""Rule dllm_sweep: the points of one sweep (Figure 4, appendix k/w tables), one lm-eval run each."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.lmeval import evaluate
    from unie.pipeline.dllm import run_sweep

    out = snakemake.output[0]
    os.makedirs(out, exist_ok=True)
    run_sweep(snakemake.wildcards.sweep, snakemake.params.dllm, dict(snakemake.input.items()), out,
              snakemake.params.device, evaluate, log=log)
