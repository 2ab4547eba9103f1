"""Rule dllm_sweep_eval: the lm-eval runs of one sweep's points (Figure 4, appendix k/w tables), one each, on the job's
threads beside other jobs; its lmeval.json, each point's lm-eval files beside it (unie.pipeline.dllm_runs.evaluate_sweep;
rule dllm_sweep times them)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.dllm_runs import evaluate_sweep

    evaluate_sweep(
        snakemake.wildcards.sweep,
        snakemake.params.dllm,
        snakemake.params.inputs,
        os.path.dirname(snakemake.output[0]),  # the sweep's folder
        snakemake.params.device,
        log=log,
        precision=job_precision(snakemake),
    )
