# Table 2: samples per (run, step count), their generative perplexity under every evaluator and
# their entropy.


def sample_inputs(wc):
    spec = config["sampling"]["runs"][wc.run]
    inputs = {"tokenizer": "resources/tokenizer"}
    for role, model in spec.get("models", {}).items():
        inputs[role] = model_files(model)
    if spec["sampler"] == "data":
        inputs["data"] = f"resources/tokenized/{TRAIN_DOMAIN}/{PPL_SPLIT}.npy"
    return inputs


def evaluator_inputs():
    inputs = {}
    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] == "model":
            inputs[f"ev_{name}"] = model_files(ev["model"])
        elif ev["kind"] == "hf":
            inputs[f"ev_{name}"] = f"resources/hf/{ev['model']}"
    return inputs


rule sample:
    # one job = one (run, step count): sample, then score the samples under every evaluator (each
    # loaded once).  Deleting either output reruns exactly this job and the table.
    input:
        unpack(lambda wc: {**sample_inputs(wc), **evaluator_inputs()}),
    output:
        samples="results/samples/{run}/steps{steps}.parquet",
        genppl="results/genppl/{run}/steps{steps}.json",
    log:
        "logs/sample/{run}/steps{steps}.log",
    benchmark:
        "benchmarks/sample/{run}/steps{steps}.tsv"
    params:
        spec=lambda wc: config["sampling"]["runs"][wc.run],
        n_samples=lambda wc: run_n_samples(config, wc.run),
        batch_size=config["sampling"]["batch_size"],
        seq_len=config["data"]["seq_len"],
        seed=config["seed"],
        evaluators=config["genppl"]["evaluators"],
        eos_rule=config["genppl"]["eos_rule"],
        train_domain=TRAIN_DOMAIN,
        device=config["device"],
    threads: config["threads"]
    resources:
        gpu=res("sample", "gpu", 0),
        cpus_per_gpu=cpus_per_gpu("sample"),
        slurm_partition=partition("sample"),
        mem_mb=res("sample", "mem_mb", 4000),
        runtime=res("sample", "runtime", 60),
    script:
        "../scripts/sample.py"
