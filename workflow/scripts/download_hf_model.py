"""Rule download_hf_model: a Hugging Face model snapshot (config, tokenizer, safetensors) into
``resources/hf/{hf_model}`` for the HF evaluators of Table 2 (needs internet; a localrule;
unie.pipeline.model_files.download_hf_model)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.model_files import download_hf_model

    download_hf_model(snakemake.params.repo_id, snakemake.output[0], log=log)
