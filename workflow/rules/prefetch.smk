# `snakemake --profile slurm prefetch` (not part of `all`): on the submit host, everything `all` downloads, through
# the same download rules (resources/), plus the datasets of lm-eval's built-in tasks into HF_HOME (the dllm_eval
# jobs load them on compute nodes, often offline); then every one of them opened in a fresh process with
# HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1, and one line per checkpoint to place by hand (unie.pipeline.prefetch).

from unie.pipeline.prefetch import LMEVAL_RECORD, REPORT as PREFETCH_REPORT, plan as prefetch_plan

PREFETCH = prefetch_plan(config)


rule prefetch_lmeval:
    output:
        run_path(LMEVAL_RECORD),
    log:
        run_path("logs/prefetch/lmeval_tasks.log"),
    retries: 2
    localrule: DOWNLOADS_LOCAL  # where the hub is reachable: the submit host, or the download partition
    threads: 1
    resources:
        **rule_resources("prefetch_lmeval", 8000, 120),
    params:
        tasks=list(PREFETCH.lmeval_tasks),
    script:
        "../scripts/prefetch_lmeval.py"


rule prefetch:
    input:
        **{kind: files for kind, files in PREFETCH.files(RUN_DIR).items() if files},
    output:
        run_path(PREFETCH_REPORT),
    log:
        run_path("logs/prefetch/check.log"),
    localrule: True
    threads: 1
    params:
        by_hand=[dict(item) for item in PREFETCH.by_hand],
    script:
        "../scripts/prefetch.py"
