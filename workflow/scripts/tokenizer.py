"""Rule tokenizer: the word-level toy vocabulary, or a Hugging Face tokenizer saved locally."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    spec = snakemake.params.tokenizer
    if spec["kind"] == "word":
        from unie.data.tokenizer import word_tokenizer
        from unie.data.toy_world import word_list

        tok = word_tokenizer(word_list())
    else:
        from unie.data.hub import fetch_tokenizer

        tok = fetch_tokenizer(spec["path"], snakemake.output[0])
    tok.save(snakemake.output[0])
    log(f"tokenizer {tok.info()}")
