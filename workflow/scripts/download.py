"""Rule download: the raw corpus of one (domain, split) as Parquet ``text``.

Toy world: generate stationary windows (a pure function of seed, domain, split, size).
Paper profile: a Hugging Face dataset (or a local file) with the paper's detokeniser, written a batch of
documents at a time (OpenWebText never sits in memory)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    data = snakemake.params.data
    domain, split = snakemake.wildcards.domain, snakemake.wildcards.split
    if data["source"] == "toy":
        from unie.data.corpus import write_text_parquet
        from unie.data.toy_world import generate_corpus

        texts = generate_corpus(domain, split, data["splits"][split], data["seq_len"], seed=snakemake.params.seed)
        write_text_parquet(texts, snakemake.output[0])
        n = len(texts)
    else:
        from unie.data.corpus import write_text_batches
        from unie.data.hub import iter_documents

        n = write_text_batches(iter_documents(data["hf"][domain][split]), snakemake.output[0])
    log(f"{domain}/{split}: {n} documents -> {snakemake.output[0]}")
