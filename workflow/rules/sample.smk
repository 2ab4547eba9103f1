# Table 2: samples per (run, step count), their generative perplexity under every evaluator and
# their entropy.


def sample_inputs(wc):
    return run_inputs(wc.run)


def run_inputs(run):
    spec = config["sampling"]["runs"][run]
    inputs = {"tokenizer": "resources/tokenizer"}
    for role, model in spec.get("models", {}).items():
        inputs[role] = model_files(model)
    if spec["sampler"] == "data":
        inputs["data"] = f"resources/tokenized/{TRAIN_DOMAIN}/{PPL_SPLIT}.parquet"
    return inputs


def evaluator_inputs():
    inputs = {}
    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] == "model":
            inputs[f"ev_{name}"] = model_files(ev["model"])
        elif ev["kind"] == "hf":
            inputs[f"ev_{name}"] = f"resources/hf/{ev['model']}"
    return inputs


def sample_params():
    return dict(
        spec=lambda wc: config["sampling"]["runs"][wc.run],
        n_samples=lambda wc: run_n_samples(config, wc.run),
        batch_size=config["sampling"]["batch_size"],
        seq_len=config["data"]["seq_len"],
        seed=config["seed"],
        evaluators=config["genppl"]["evaluators"],
        eos_rule=config["genppl"]["eos_rule"],
        train_domain=TRAIN_DOMAIN,
        device=config["device"],
        **precision_params(),
    )


# `sampling.job: step` (default; the paper profile: hours per step count on a GPU): one job per (run, step
# count).  `sampling.job: run` (the toy profile, where a job is seconds and starting Python and torch costs ~2 s):
# the runs that use `sampling.steps` get one job for all their step counts (`sample_run`); the samples of a step
# count depend only on (seed, run, steps), so both give the same files.


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
    wildcard_constraints:
        run="|".join(STEP_RUNS) or "(?!)",
    params:
        steps=lambda wc: [int(wc.steps)],
        **sample_params(),
    threads: config["threads"]
    resources:
        **rule_resources("sample", 4000, 60, gpu=True),
    script:
        "../scripts/sample.py"


rule sample_run:
    # one job = one run at every step count of `sampling.steps` (`sampling.job: run`).  Deleting one output
    # reruns this run's job (all its step counts) and the table.
    input:
        unpack(lambda wc: {**sample_inputs(wc), **evaluator_inputs()}),
    output:
        samples=expand("results/samples/{{run}}/steps{s}.parquet", s=config["sampling"]["steps"]),
        genppl=expand("results/genppl/{{run}}/steps{s}.json", s=config["sampling"]["steps"]),
    log:
        "logs/sample/{run}.log",
    benchmark:
        "benchmarks/sample/{run}.tsv"
    wildcard_constraints:
        run="|".join(GROUPED_RUNS) or "(?!)",
    params:
        steps=config["sampling"]["steps"],
        **sample_params(),
    threads: config["threads"]
    resources:
        **rule_resources("sample", 4000, 60, runtime_times=len(config["sampling"]["steps"]), gpu=True),
    script:
        "../scripts/sample.py"


# `sampling.job: table`: every run of a table or figure (Table 2's, the fig2_* or the fig3_* runs: seconds each here)
# in one job, each run as rules sample / sample_run make it (its own generator, its models loaded per run; the same
# files).  Deleting one output reruns the job.
for _group, _runs in TABLE_RUNS.items():

    rule:
        name:
            f"sample_{_group}"
        input:
            unpack(lambda wc, runs=tuple(_runs): {**{f"{r}_{k}": v for r in runs for k, v in run_inputs(r).items()},
                                                   **evaluator_inputs()}),
        output:
            samples=sample_targets(_runs),
            genppl=genppl_targets(_runs),
        log:
            f"logs/sample/{_group}.log",
        benchmark:
            f"benchmarks/sample/{_group}.tsv"
        params:
            runs={r: {"spec": config["sampling"]["runs"][r], "n_samples": run_n_samples(config, r),
                      "steps": run_steps(config, r),
                      "inputs": plain_files(run_inputs(r))}
                  for r in _runs},
            **{k: v for k, v in sample_params().items() if k not in ("spec", "n_samples")},
        threads: config["threads"]
        resources:
            **rule_resources("sample", 4000, 60, gpu=True),
        script:
            "../scripts/sample.py"
