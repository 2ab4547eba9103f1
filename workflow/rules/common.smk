# Shared helpers: config cross-checks, wildcard constraints, target lists, per-rule resources.

import os
import sys

from unie.config.expand import run_n_samples
from unie.config.settings import DOWNLOAD_RULES, ClusterSettings, WorkflowSettings, runtime_at
from unie.config.targets import TARGETS, report_args

# config: resolved, validated, its figure runs added (expand_config) and cross-checked (check_config) by the
# Snakefile's workflow_config; FACTS: what the rules read from the registries for it (the Snakefile, RuleFacts)
SETTINGS = WorkflowSettings.from_config(config)
# what a Slurm site sets beyond its partitions (config `cluster`, docs/paper-profile.md): the GPU request form, the
# Hugging Face cache, and whether the jobs run with the Hugging Face libraries offline
CLUSTER = ClusterSettings.from_config(config)
# the downloads' partition (a transfer / data-mover partition with network access) where the site has one; without
# it the downloads are local rules on the submit host
DOWNLOAD_PARTITION = config.get("slurm_partitions", {}).get("download")
DOWNLOADS_LOCAL = not DOWNLOAD_PARTITION


def _target_rules():
    """The rules of the jobs this process runs when it is a cluster job (Snakemake's --target-jobs), else ()."""
    specs = getattr(getattr(workflow, "dag_settings", None), "target_jobs", None) or ()
    return tuple(getattr(spec, "rulename", None) for spec in specs)


# The environment of every process of the run (scripts inherit it): HF_HOME where the site sets one, and inside a
# cluster job that is not a download HF_HUB_OFFLINE, HF_DATASETS_OFFLINE and TRANSFORMERS_OFFLINE, so a job reads
# only what the downloads (and prefetch) left in HF_HOME and never waits on the network
os.environ.update(CLUSTER.job_environment(_target_rules(), workflow.remote_exec))


def _check_gpu_request_form():
    """One GPU request form per job: a `gres`, `gpu`, `gpus` or `gpu_model` in the profile's default-resources or
    set-resources would be sent beside the rules' own (sbatch --gres and --gpus both): refused, naming where."""
    rs = workflow.resource_settings
    places = {
        "default-resources": rs.default_resources,
        **{f"set-resources {r}": v for r, v in (rs.overwrite_resources or {}).items()},
    }
    for where, res in places.items():
        bad = sorted(set(res or {}) & {"gres", "gpu", "gpus", "gpu_model"})  # Snakemake's Resources: a mapping
        if bad:
            print(
                f"unie: error: {where}: {', '.join(bad)}: the rules ask for their GPUs themselves, in the one form "
                f"config key cluster.gpu_request names ({CLUSTER.gpu_request}), and this would add a second "
                f"(sbatch --gres and --gpus both); set cluster.gpu_request and cluster.gpu_model, and GPU counts "
                f"under resources:, in the config instead",
                file=sys.stderr,
            )
            sys.exit(1)


_check_gpu_request_form()


def run_path(path):
    """``path`` (``results/...``, ``resources/...``, ``logs/...``, ``benchmarks/...``; wildcards kept) in this run's
    directory (the Snakefile's RUN_DIR, ``runs/<name>``).  The shared downloads (resources/hf, resources/released,
    resources/paper_tasks) are written without it.  The one way the rules write a path in the run's directory
    (``run_path(f"results/timing/{r}.json")``, never an f-string on RUN_DIR); unie.config.dllm_plan.DllmPlan.path is
    the same for the DLLM half's plan."""
    return f"{RUN_DIR}/{path}"


# The precision every job that runs a model runs in: the config's `precision` on the config's `device`, fp32 on a CPU
# (WorkflowSettings.job_precision, the one place it is read).  Each such rule gets it twice, from here: as a param
# (precision_params: what its script reads, unie.pipeline.rule.job_precision, and what reruns it when it changes)
# and as the resource `precision` (rule_resources: what `snakemake -n` prints beside the GPU request; no executor
# reads it).
PRECISION = SETTINGS.job_precision


def precision_params():
    """``precision`` only when not fp32: fp32 jobs keep their params, so existing result trees do not rerun."""
    return {} if PRECISION == "fp32" else {"precision": PRECISION}


# optional workflow switches, their defaults in one place
MODELS = list(config["models"])
RUNS = list(config["sampling"]["runs"])
# sampling.job (unie.config.sampling_jobs): step -> one job per (run, step count) (rule sample); run -> one job per run on
# the standard step counts (rule sample_run); table -> the runs of a table or figure never sampled in this run
# directory in one job (rules sample_table2, sample_fig2, sample_fig3: Table 2's runs, those Figure 2 adds (fig2_*),
# those Figure 3 adds (fig3_*)), a run sampled before by its own job (sample_run, sample), with its table's settings
from unie.config.sampling_jobs import sampling_jobs  # noqa: E402

SAMPLING = sampling_jobs(
    SETTINGS.sampling_job,
    {r: FACTS.run_steps[r] for r in RUNS},
    config["sampling"]["steps"],
    RUN_DIR,
    table2_runs=set(config["tables"]["table2_genppl"].values()),
)
TABLE_RUNS = SAMPLING.tables  # table -> the runs its job samples
GROUPED_RUNS = SAMPLING.per_run  # rule sample_run
STEP_RUNS = SAMPLING.per_step  # rule sample
SOURCES = FACTS.likelihood_sources  # Table 1 sources: exact, models with a likelihood, energy estimators
PPL_MODELS = [m for m, kind in SOURCES.items() if kind == "model"]
ESTIMATORS = [m for m, kind in SOURCES.items() if kind == "energy"]
DOMAINS = config["data"]["domains"]
TRAIN_DOMAIN = config["data"]["train_domain"]
PPL_SPLIT = config["ppl"]["split"]
# token files are Parquet (resources/tokenized/{domain}/{split}.parquet, rule tokenize); training reads the train
# split through a zero-copy Arrow view derived from it, cached here (unie.data.tokens.token_view)
TOKEN_CACHE = run_path(f"resources/cache/tokenized/{TRAIN_DOMAIN}")
# report(file, **REPORT[target]): the caption (workflow/report/{target}.rst), category and subcategory of a target's
# files in `snakemake --report report.html` (unie.config.targets)
REPORT = {name: report_args(name) for name in TARGETS if TARGETS[name].category}


wildcard_constraints:
    model="|".join(MODELS),
    ppl_model="|".join(PPL_MODELS) or "(?!)",
    estimator="|".join(ESTIMATORS) or "(?!)",
    run="|".join(RUNS),
    domain="|".join(DOMAINS),
    split="train|valid|test",
    steps=r"\d+",


def res(rule_name, key, default):
    """Slurm resource of a rule from config['resources'] (paper profile), else the default."""
    return config.get("resources", {}).get(rule_name, {}).get(key, default)


def rule_resources(rule_name, mem_mb=None, runtime=None, *, gpu=False, gpu_cpus=True, precision=True, runtime_times=1):
    """A rule's ``resources:`` (``resources: **rule_resources(...)``), written here once: its Slurm partition
    (:func:`partition`); with ``gpu`` (a rule that runs networks) its GPU request (:func:`res`), sbatch's
    --cpus-per-gpu (:func:`cpus_per_gpu`, unless ``gpu_cpus=False``) and the precision its networks run in
    (:data:`PRECISION`, printed by snakemake -n; no executor reads it; unless ``precision=False``); the memory and the
    runtime (minutes, x ``runtime_times`` for a job that does that many jobs' work, capped by max_runtime) when a
    default is given, config['resources'][rule_name] overriding it.  The runtime grows with Snakemake's attempt: a
    job resubmitted after hitting its time limit (`retries` in slurm/) asks for 2x, then 3x, and a training job
    resumes from its last checkpoint; never above config['max_runtime'] (the partition's time limit: a longer request
    would stay pending forever)."""
    out = {}
    if gpu:
        out.update(CLUSTER.gpu_resources(res(rule_name, "gpu", 0)))  # --gpus or --gres, the site's one form
        if gpu_cpus:
            out["cpus_per_gpu"] = cpus_per_gpu(rule_name)
    out["slurm_partition"] = partition(rule_name)
    if gpu and precision:
        out["precision"] = PRECISION
    if mem_mb is not None:
        out["mem_mb"] = res(rule_name, "mem_mb", mem_mb)
    if runtime is not None:
        minutes = res(rule_name, "runtime", runtime) * runtime_times
        out["runtime"] = lambda wildcards, attempt: runtime_at(minutes, attempt, config.get("max_runtime"))
    return out


def cpus_per_gpu(rule_name):
    """sbatch --cpus-per-gpu of a GPU job: config['resources'][rule]['cpus_per_gpu'], else the job's `threads`
    shared by its GPUs (a data-parallel job's ranks each run threads / gpu torch threads)."""
    return res(rule_name, "cpus_per_gpu", max(1, config["threads"] // max(1, res(rule_name, "gpu", 0))))


def held_cores():
    """Threads of a timed job (rules timing, bench_sampler): on a CPU, every core of a local run (--cores), so that
    no other job runs beside it; under a cluster executor (no --cores: each job has its own allocation) and on a
    GPU, the configured threads.  Inside a cluster job (the job step that `--executor slurm` starts with
    `srun`, where Snakemake re-reads this file with the allocation's --cores) the configured threads too: the
    job step must ask for no more CPUs than the submitting run asked sbatch for."""
    if config["device"] != "cpu" or workflow.remote_exec:
        return config["threads"]
    try:
        return workflow.cores
    except Exception:  # snakemake's WorkflowError: no total number of cores (e.g. --executor slurm)
        return config["threads"]


def partition(rule_name):
    """Slurm partition of a rule, from its GPU request: config['slurm_partitions']['gpu'] when it asks for a GPU,
    else ['cpu'] (defaults 'gpu' and 'cpu'; a site overrides them in the config or with
    ``--config 'slurm_partitions={cpu: normal, gpu: a100}'``), so a GPU job never lands on a CPU partition; a
    download rule goes to ['download'] where the site names one (it is then no local rule)."""
    names = {"cpu": "cpu", "gpu": "gpu", **config.get("slurm_partitions", {})}
    if rule_name in DOWNLOAD_RULES and DOWNLOAD_PARTITION:  # a download submitted to the site's transfer partition
        return DOWNLOAD_PARTITION
    return names["gpu" if res(rule_name, "gpu", 0) > 0 else "cpu"]


def plain_files(inputs):
    """A job's input mapping as a param: each value a path or a list of paths, as plain strings (a rule's output
    list would carry the rule, and its unpicklable resources, into the job)."""
    return {k: v if isinstance(v, str) else [str(f) for f in v] for k, v in inputs.items()}


def model_files(name):
    return [run_path(f"results/models/{name}/model.safetensors"), run_path(f"results/models/{name}/config.json")]


def sample_targets(runs=None):
    return [run_path(f"results/samples/{run}/steps{s}.parquet") for run in (runs or RUNS) for s in FACTS.run_steps[run]]


def genppl_targets(runs=None):
    return [run_path(f"results/genppl/{run}/steps{s}.json") for run in (runs or RUNS) for s in FACTS.run_steps[run]]


def final_outputs():
    out = [
        run_path("results/tables/table1_ppl.tex"),
        run_path("results/tables/table1_ppl.csv"),
        run_path("results/tables/table2_genppl.tex"),
        run_path("results/tables/table2_genppl.csv"),
    ]
    if config["data"]["source"] == "toy":
        out += [run_path("results/tables/partition_check.csv"), run_path("results/tables/partition_check.tex")]
    if config.get("dllm"):
        out += [
            run_path("results/tables/table3_dllm.tex"),
            run_path("results/tables/table3_dllm.csv"),
            run_path("results/tables/table_app_dllm_full.tex"),
            run_path("results/tables/table_app_dllm_full.csv"),
        ]
        if any(r.get("selection_table") for r in config["dllm"].get("rows", {}).values()):
            out += [
                run_path("results/tables/table_app_selection.tex"),
                run_path("results/tables/table_app_selection.csv"),
            ]
    if config.get("figures", {}).get("fig2_ablation"):
        out += [run_path("results/figures/fig2_ablation.pdf"), run_path("results/figures/fig2_ablation.png")]
    out += [run_path(f"results/tables/paper_vs_ours.{ext}") for ext in ("md", "tex")]
    if config["data"]["source"] == "toy" and config.get("figures", {}).get("case_studies"):
        out += [
            run_path(f"results/figures/case_{c}.{ext}")
            for c in ("invariant", "independent", "non_invariant", "non_independent")
            for ext in ("pdf", "png")
        ]
    sweeps = config.get("dllm", {}).get("sweeps", {}).get("sets", {})
    if "fig4" in sweeps:
        out += [run_path(f"results/figures/fig4_dllm_tradeoff.{ext}") for ext in ("pdf", "png", "csv")]
    out += [
        run_path(f"results/tables/table_{s}.{ext}") for s in ("app_k", "app_w") if s in sweeps for ext in ("tex", "csv")
    ]
    if config.get("figures", {}).get("fig3_tradeoff"):
        out += [run_path(f"results/figures/fig3_tradeoff.{ext}") for ext in ("pdf", "png", "csv", "json")]
    return out + [run_path("results/report/paper.html")]  # every table and figure above on one page (rule paper_page)
