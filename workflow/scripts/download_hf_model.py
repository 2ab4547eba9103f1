"""Rule download_hf_model: a Hugging Face model snapshot (config, tokenizer, safetensors) into
``resources/hf/{hf_model}`` for the HF evaluators of Table 2 (needs internet; a localrule)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.data.hub import fetch_model

    repo_id = snakemake.params.repo_id
    out = fetch_model(repo_id, snakemake.output[0])
    files = sorted(p.name for p in out.iterdir())
    log(f"{repo_id} -> {out}: {', '.join(files)}")
