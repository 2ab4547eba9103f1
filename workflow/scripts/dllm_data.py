"""Rule dllm_data: tokenizers (word-level, BPE) and the training tensors of the DLLM half
(unie.pipeline.dllm_runs.dllm_data)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.dllm_runs import dllm_data

    dllm_data(
        snakemake.params.dllm,
        os.path.dirname(snakemake.input.yamls[0]),
        snakemake.input.tokenizer,
        snakemake.input.toy,
        os.path.dirname(snakemake.output.meta),
        log=log,
    )
