# Data: "download" (toy: generate; paper: Hugging Face datasets) -> tokenizer -> tokenised chunks.


rule download:
    output:
        run_path("resources/raw/{domain}/{split}.parquet"),
    log:
        run_path("logs/download/{domain}/{split}.log"),
    # Hugging Face datasets are fetched on the submit host (compute nodes are often offline), or on the site's
    # download partition (slurm_partitions.download); the toy world's generation is an ordinary job
    localrule: config["data"]["source"] == "hf" and DOWNLOADS_LOCAL
    threads: 1
    resources:
        **rule_resources("download", 4000, 60),
    params:
        data=config["data"],
        seed=config["seed"],
    script:
        "../scripts/download.py"


rule tokenizer:
    output:
        directory(run_path("resources/tokenizer")),
    log:
        run_path("logs/tokenizer.log"),
    localrule: DOWNLOADS_LOCAL  # may download (paper profile): the submit host, or the download partition
    threads: 1
    resources:
        **rule_resources("tokenizer", 4000, 30),
    params:
        tokenizer=config["tokenizer"],
    script:
        "../scripts/tokenizer.py"


def token_source(domain, split):
    """What a token file was made from, beyond the raw file: the dataset and split, and the toy world's seed and size
    or the Hugging Face spec."""
    data = config["data"]
    made = (
        {"hf": data["hf"][domain][split]}
        if data["source"] == "hf"
        else {"toy_world": {"seed": config["seed"], "sequences": data["splits"][split]}}
    )
    return {"dataset": domain, "split": split, **made}


rule tokenize:
    input:
        raw=run_path("resources/raw/{domain}/{split}.parquet"),
        tokenizer=run_path("resources/tokenizer"),
    output:
        # one row of L int32 per chunk; its metadata: the tokenizer, L, the wrapping, the source, the content hash
        tokens=run_path("resources/tokenized/{domain}/{split}.parquet"),
    log:
        run_path("logs/tokenize/{domain}/{split}.log"),
    threads: 1
    resources:
        **rule_resources("tokenize", 8000, 120),
    params:
        seq_len=config["data"]["seq_len"],
        insert_eos=SETTINGS.insert_eos,
        chunk_specials=SETTINGS.chunk_specials,
        source=lambda wc: token_source(wc.domain, wc.split),  # recorded in the token file's metadata
    script:
        "../scripts/tokenize_split.py"
