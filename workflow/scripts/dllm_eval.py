"""Rules dllm_eval (one Table 3 row) and dllm_eval_{model} (every row of one backbone, `dllm.eval_job: model`):
per row one lm-eval run over the seven tasks (lm-eval writes the JSONs), then the row's effect against its
backbone (unie.pipeline.dllm_runs.run_rows).  More than one GPU (resources.gpu > 1 on CUDA): data parallel, one
rank per GPU under torchrun."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.dllm_runs import run_rows
    from unie.pipeline.launch import rule_processes

    p, out = snakemake.params, snakemake.output
    run_rows(
        p.rows,
        p.inputs,
        p.dllm,
        out.results,
        out.effect,
        p.device,
        rule_processes(snakemake),
        log=log,
        precision=job_precision(snakemake),
        threads=snakemake.threads,
    )
