# Table 1: perplexity (a bound for diffusion models, exact for AR and for the toy world's pi) on
# the evaluation split of every domain.  One job per model covers all domains (one model load).


rule ppl:
    input:
        model=lambda wc: model_files(wc.model),
        tokenizer="resources/tokenizer",
        data=expand("resources/tokenized/{domain}/{split}.parquet", domain=DOMAINS, split=PPL_SPLIT),
    output:
        "results/ppl/{model}.json",
    log:
        "logs/ppl/{model}.log",
    params:
        domains=DOMAINS,
        ppl=config["ppl"],
        seed=config["seed"],
        device=config["device"],
    threads: config["threads"]
    resources:
        gpu=res("ppl", "gpu", 0),
        mem_mb=res("ppl", "mem_mb", 4000),
        runtime=res("ppl", "runtime", 60),
    script:
        "../scripts/ppl.py"


rule ppl_exact:
    input:
        tokenizer="resources/tokenizer",
        data=expand("resources/tokenized/{domain}/{split}.parquet", domain=DOMAINS, split=PPL_SPLIT),
    output:
        "results/ppl/exact.json",
    log:
        "logs/ppl/exact.log",
    params:
        domains=DOMAINS,
        ppl=config["ppl"],
    threads: 1
    script:
        "../scripts/ppl_exact.py"
