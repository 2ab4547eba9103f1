"""Rule dllm_train: one model of config['dllm']['models'] (LLaDA-like, Dream-like, AR rows, proxy).
More than one process (resources.gpu > 1 on CUDA, or resources.dllm_train.processes): data parallel under torchrun."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os

    from unie.pipeline.launch import rule_processes, run_training

    init = snakemake.input.get("init")
    init_dir = os.path.dirname(init) if init else None
    init_tok = snakemake.input.get("init_tokenizer") or (os.path.join(init_dir, "tokenizer") if init_dir else None)
    kwargs = dict(
        name=snakemake.wildcards.dmodel,
        spec=snakemake.params.spec,
        data_dir=os.path.dirname(snakemake.input.meta),
        out_dir=os.path.dirname(snakemake.output.weights),
        ckpt_dir=snakemake.params.ckpt_dir,
        device=snakemake.params.device,
        init_dir=init_dir,
        init_tokenizer_dir=init_tok,
        precision=job_precision(snakemake),
    )
    run_training("dllm", kwargs, rule_processes(snakemake), log=log, threads=snakemake.threads)
