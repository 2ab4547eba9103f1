"""Rule tokenizer: the word-level toy vocabulary, or a Hugging Face tokenizer saved locally
(unie.pipeline.data_files)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.data_files import write_tokenizer

    write_tokenizer(snakemake.params.tokenizer, snakemake.output[0], log=log)
