# Table 2: samples per (run, step count), then generative perplexity under every evaluator
# (each evaluator loaded once per job) and entropy.


def sample_inputs(wc):
    spec = config["sampling"]["runs"][wc.run]
    inputs = {"tokenizer": "resources/tokenizer"}
    for role, model in spec.get("models", {}).items():
        inputs[role] = model_files(model)
    if spec["sampler"] == "data":
        inputs["data"] = f"resources/tokenized/{TRAIN_DOMAIN}/{PPL_SPLIT}.parquet"
    return inputs


rule sample:
    input:
        unpack(sample_inputs),
    output:
        "results/samples/{run}/steps{steps}.parquet",
    log:
        "logs/sample/{run}/steps{steps}.log",
    benchmark:
        "benchmarks/sample/{run}/steps{steps}.tsv"
    params:
        spec=lambda wc: config["sampling"]["runs"][wc.run],
        n_samples=config["sampling"]["n_samples"],
        batch_size=config["sampling"]["batch_size"],
        seq_len=config["data"]["seq_len"],
        seed=config["seed"],
        device=config["device"],
    threads: config["threads"]
    resources:
        gpu=res("sample", "gpu", 0),
        mem_mb=res("sample", "mem_mb", 4000),
        runtime=res("sample", "runtime", 60),
    script:
        "../scripts/sample.py"


def evaluator_inputs(wc):
    inputs = {"samples": f"results/samples/{wc.run}/steps{wc.steps}.parquet", "tokenizer": "resources/tokenizer"}
    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] == "model":
            inputs[f"ev_{name}"] = model_files(ev["model"])
        elif ev["kind"] == "hf":
            inputs[f"ev_{name}"] = f"resources/hf/{ev['model']}"
    return inputs


rule genppl:
    input:
        unpack(evaluator_inputs),
    output:
        "results/genppl/{run}/steps{steps}.json",
    log:
        "logs/genppl/{run}/steps{steps}.log",
    params:
        evaluators=config["genppl"]["evaluators"],
        eos_rule=config["genppl"]["eos_rule"],
        train_domain=TRAIN_DOMAIN,
        device=config["device"],
    threads: config["threads"]
    resources:
        gpu=res("genppl", "gpu", 0),
        mem_mb=res("genppl", "mem_mb", 4000),
        runtime=res("genppl", "runtime", 60),
    script:
        "../scripts/genppl.py"
