"""Rule train: one model of config['models'] with its method's loss; EMA weights -> safetensors.
More than one process (resources.gpu > 1 on CUDA, or resources.train.processes): data parallel under torchrun."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.launch import rule_processes, run_training

    kwargs = dict(
        name=snakemake.wildcards.model,
        spec=snakemake.params.spec,
        train_path=snakemake.input.train,
        tokenizer_dir=snakemake.input.tokenizer,
        out_dir=snakemake.output.weights.rsplit("/", 1)[0],
        ckpt_dir=snakemake.params.ckpt_dir,
        token_cache=snakemake.params.token_cache,
        seq_len=snakemake.params.seq_len,
        device=snakemake.params.device,
        init_dir=snakemake.input.get("init", "").rsplit("/", 1)[0] or None,
        partner_dirs={
            k[len("partner_") :]: v.rsplit("/", 1)[0] for k, v in snakemake.input.items() if k.startswith("partner_")
        },
        dev_path=snakemake.input.get("dev") or None,
        precision=job_precision(snakemake),
    )
    run_training("models", kwargs, rule_processes(snakemake), log=log, threads=snakemake.threads)
