"""Rule tokenize: fixed-length wrapped chunks (MDLM's ``wrap``), streamed into a Parquet token file (a row of L int32
per chunk) whose metadata says what made it (the tokenizer, L, the wrapping, the source and its hash) and the tokens'
count and content hash (unie.data.tokens)."""

from unie.data.corpus import tokenize_corpus
from unie.data.tokenizer import load_tokenizer
from unie.pipeline.rule import job

with job(snakemake) as log:
    tok = load_tokenizer(snakemake.input.tokenizer)
    n = tokenize_corpus(snakemake.input.raw, tok, snakemake.output.tokens, snakemake.params.seq_len,
                        insert_eos=snakemake.params.insert_eos, chunk_specials=snakemake.params.chunk_specials,
                        source=snakemake.params.source)
    log(f"{n} chunks of {snakemake.params.seq_len} tokens -> {snakemake.output.tokens}")
