# Table 1: perplexity (a bound for diffusion models, exact for AR and for the toy world's pi) on
# the evaluation split of every domain.  One job per model covers all domains (one model load).


rule ppl:
    input:
        model=lambda wc: model_files(wc.ppl_model),
        tokenizer=run_path("resources/tokenizer"),
        data=expand(run_path("resources/tokenized/{domain}/{split}.parquet"), domain=DOMAINS, split=PPL_SPLIT),
    output:
        run_path("results/ppl/{ppl_model}.json"),
    log:
        run_path("logs/ppl/{ppl_model}.log"),
    priority: 10  # long jobs first, so that short sample jobs fill the end of the run
    threads: config["threads"]
    resources:
        **rule_resources("ppl", 4000, 60, gpu=True),
    params:
        **precision_params(),
        domains=DOMAINS,
        ppl=config["ppl"],
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/ppl.py"


rule ppl_exact:
    input:
        tokenizer=run_path("resources/tokenizer"),
        data=expand(run_path("resources/tokenized/{domain}/{split}.parquet"), domain=DOMAINS, split=PPL_SPLIT),
    output:
        run_path("results/ppl/exact.json"),
    log:
        run_path("logs/ppl/exact.log"),
    threads: 1
    resources:
        **rule_resources("ppl_exact"),
    params:
        domains=DOMAINS,
        ppl=config["ppl"],
    script:
        "../scripts/ppl_exact.py"


def estimator_inputs(wc):
    spec = config["likelihood"][wc.estimator]
    inputs = {
        "tokenizer": run_path("resources/tokenizer"),
        "data": expand(run_path("resources/tokenized/{domain}/{split}.parquet"), domain=DOMAINS, split=PPL_SPLIT),
        "dlm": model_files(spec["dlm"]),
    }
    for role in ("proxy", "ebm"):  # the AR proxy (not for the exact context) or EDLM's energy network
        if spec.get(role):
            inputs[role] = model_files(spec[role])
    return inputs


rule ppl_energy:
    input:
        unpack(estimator_inputs),
    output:
        run_path("results/ppl/{estimator}.json"),
    log:
        run_path("logs/ppl/{estimator}.log"),
    # EDLM / Uni-EDLM rows of Table 1: the NELBO with the energy-corrected conditional (Eq. uni_edlm)
    priority: 10  # long jobs first, so that short sample jobs fill the end of the run
    threads: config["threads"]
    resources:
        **rule_resources("ppl", 4000, 60, gpu=True),
    params:
        **precision_params(),
        spec=lambda wc: config["likelihood"][wc.estimator],
        domains=DOMAINS,
        ppl=config["ppl"],
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/ppl_energy.py"
