"""Rule dllm_train: one model of config['dllm']['models'] (LLaDA-like, Dream-like, AR rows, proxy)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.dllm import train_dllm_model

    init = snakemake.input.get("init")
    init_dir = os.path.dirname(init) if init else None
    init_tok = snakemake.input.get("init_tokenizer") or (os.path.join(init_dir, "tokenizer") if init_dir else None)
    train_dllm_model(snakemake.wildcards.dmodel, snakemake.params.spec, os.path.dirname(snakemake.input.meta),
                     os.path.dirname(snakemake.output.weights), snakemake.params.ckpt_dir,
                     device=snakemake.params.device, init_dir=init_dir, init_tokenizer_dir=init_tok, log=log)
