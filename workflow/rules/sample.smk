# Table 2: samples per (run, step count), their generative perplexity under every evaluator and
# their entropy.


def sample_inputs(wc):
    return run_inputs(wc.run)


def run_inputs(run):
    spec = config["sampling"]["runs"][run]
    inputs = {"tokenizer": run_path("resources/tokenizer")}
    for role, model in spec.get("models", {}).items():
        inputs[role] = model_files(model)
    if spec["sampler"] == "data":
        inputs["data"] = run_path(f"resources/tokenized/{TRAIN_DOMAIN}/{PPL_SPLIT}.parquet")
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
        **shared_sample_params(),
    )


def shared_sample_params():
    return dict(
        batch_size=config["sampling"]["batch_size"],
        seq_len=config["data"]["seq_len"],
        seed=config["seed"],
        evaluators=config["genppl"]["evaluators"],
        eos_rule=config["genppl"]["eos_rule"],
        train_domain=TRAIN_DOMAIN,
        device=config["device"],
        **precision_params(),
    )


def table_runs_param(runs):
    """Every run of a table (``runs``) with its settings and files: the ``runs`` param of each job of the table's
    runs (``sampling.job: table``), whichever runs it samples."""
    return {
        r: {
            "spec": config["sampling"]["runs"][r],
            "n_samples": run_n_samples(config, r),
            "steps": FACTS.run_steps[r],
            "inputs": plain_files(run_inputs(r)),
        }
        for r in runs
    }


def table_inputs(runs):
    """The input files of each job of a table's runs (``runs``; ``sampling.job: table``): all of its runs' and the
    evaluators'."""
    return {
        **{f"{r}_{k}": v for r in runs for k, v in run_inputs(r).items()},
        **evaluator_inputs(),
    }


# The jobs of one run: under `sampling.job: table` (unie.config.sampling_jobs) they take their table's parameters and
# input files (a file a table job wrote is then up to date for the run's own job, and the reverse); else the run's.
if SETTINGS.sampling_job == "table":
    RUN_JOB_INPUTS = lambda wc: table_inputs(SAMPLING.job_runs(wc.run))
    RUN_JOB_PARAMS = dict(runs=lambda wc: table_runs_param(SAMPLING.job_runs(wc.run)), **shared_sample_params())
    STEP_JOB_PARAMS = RUN_JOB_PARAMS
else:
    RUN_JOB_INPUTS = lambda wc: {**sample_inputs(wc), **evaluator_inputs()}
    RUN_JOB_PARAMS = dict(steps=config["sampling"]["steps"], **sample_params())
    STEP_JOB_PARAMS = dict(steps=lambda wc: [int(wc.steps)], **sample_params())


# `sampling.job: step` (default; the paper profile: hours per step count on a GPU): one job per (run, step
# count).  `sampling.job: run`: the runs that use `sampling.steps` get one job for all their step counts
# (`sample_run`).  `sampling.job: table` (the toy profiles, where a job is seconds and starting Python and torch
# costs ~2 s): the runs of a table or figure never sampled here in one job (`sample_{table}`), the others as under
# `run`.  The samples of a step count depend only on (seed, run, steps), so every way gives the same files.


# Each rule is defined only when some run takes its shape; every sampling rule is written at the same indentation:
# Snakemake compares a script rule's source lines (its `script:` directive) to see whether its code changed, and a
# file a table job wrote must count as made by the run's own job (the same lines, the same params and inputs).
if STEP_RUNS:

    rule sample:
        # one job = one (run, step count): sample, then score the samples under every evaluator (each
        # loaded once).  Deleting either output reruns exactly this job and the table.
        input:
            unpack(RUN_JOB_INPUTS),
        output:
            samples=run_path("results/samples/{run}/steps{steps}.parquet"),
            genppl=run_path("results/genppl/{run}/steps{steps}.json"),
        log:
            run_path("logs/sample/{run}/steps{steps}.log"),
        wildcard_constraints:
            run="|".join(STEP_RUNS) or "(?!)",
        threads: config["threads"]
        resources:
            **rule_resources("sample", 4000, 60, gpu=True),
        params:
            **STEP_JOB_PARAMS,
        script:
            "../scripts/sample.py"


if GROUPED_RUNS:

    rule sample_run:
        # one job = one run at every step count of `sampling.steps`.  Deleting one output reruns this run's job (all
        # its step counts) and the tables that read it.
        input:
            unpack(RUN_JOB_INPUTS),
        output:
            samples=expand(run_path("results/samples/{{run}}/steps{s}.parquet"), s=config["sampling"]["steps"]),
            genppl=expand(run_path("results/genppl/{{run}}/steps{s}.json"), s=config["sampling"]["steps"]),
        log:
            run_path("logs/sample/{run}.log"),
        wildcard_constraints:
            run="|".join(GROUPED_RUNS) or "(?!)",
        threads: config["threads"]
        resources:
            **rule_resources("sample", 4000, 60, runtime_times=len(config["sampling"]["steps"]), gpu=True),
        params:
            **RUN_JOB_PARAMS,
        script:
            "../scripts/sample.py"


# `sampling.job: table`: the fresh runs of a table or figure (Table 2's, the fig2_* or the fig3_* runs: seconds each
# here) in one job, each run as rules sample / sample_run make it (its own generator, its models loaded per run; the
# same files).
for _group, _runs in TABLE_RUNS.items():

    rule:
        name:
            f"sample_{_group}"
        input:
            unpack(lambda wc, table=_group: table_inputs(SAMPLING.table_runs[table])),
        output:
            samples=sample_targets(_runs),
            genppl=genppl_targets(_runs),
        log:
            run_path(f"logs/sample/{_group}.log"),
        threads: config["threads"]
        resources:
            **rule_resources("sample", 4000, 60, gpu=True),
        params:
            **shared_sample_params(),
            runs=table_runs_param(SAMPLING.table_runs[_group]),
        script:
            "../scripts/sample.py"
