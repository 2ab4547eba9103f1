# The DLLM half (Table 3): toy benchmarks as local lm-eval tasks, the tiny LLaDA-like and Dream-like backbones,
# the AR rows and the proxy, one lm-eval run per Table 3 row, and the table.  Every path below is in the run's
# directory (run_path, common.smk); the Hugging Face checkpoints (resources/hf/) and task files are shared downloads.
# Which files each rule reads and which parameters it passes: unie.config.dllm_plan (PLAN).
#
#   resources/dllm/tasks/            lm-eval task YAMLs + JSONL (rule dllm_tasks)
#   resources/dllm/meta.json         tokenizers and training tensors (rule dllm_data)
#   results/dllm/models/{dmodel}/    trained DLLM-half models (rule dllm_train)
#   results/dllm/rows/{row}/         lm-eval's results_*.json, samples_*.jsonl, throughput.json, effect.json (the
#                                    row against its backbone: paired change, window disagreement) (rule
#                                    dllm_eval, or dllm_eval_{model} for all rows of a model)
#   results/tables/table3_dllm.*     Table 3 (rows without appendix_only / selection_table); table_app_dllm_full.*:
#                                    those and the appendix_only ones; table_app_selection.*: the selection rules

from unie.config.dllm_plan import DllmPlan  # noqa: E402
from unie.data.tasks import FORMAT as TASK_FORMAT  # noqa: E402
from unie.pipeline.prefetch import LMEVAL_RECORD, lmeval_tasks_read  # noqa: E402

# every lm-eval job of lm-eval's built-in tasks reads rule prefetch_lmeval's record (prefetch.smk; DllmPlan's doc)
PLAN = DllmPlan(config, RUN_DIR, LMEVAL_RECORD if lmeval_tasks_read(config) else None)
DLLM = PLAN.dllm
JOB = {"device": config["device"], **precision_params()}  # what every job that runs a model reads besides
TEX, CSV = {"file": "LaTeX"}, {"file": "CSV"}  # the report's labels of a table's files


wildcard_constraints:
    dmodel="|".join(PLAN.models) or "(?!)",
    row="|".join(PLAN.rows) or "(?!)",


rule dllm_tasks:
    output:
        yamls=PLAN.task_yamls(),
        utils=run_path("resources/dllm/tasks/utils.py"),
    log:
        run_path("logs/dllm/tasks.log"),
    threads: 1
    resources:
        **rule_resources("dllm_tasks"),
    params:
        tasks=PLAN.task_data,
        answers=TASK_FORMAT,  # the answers' format (unie.data.tasks.FORMAT): another format writes the tasks again
    script:
        "../scripts/dllm_tasks.py"


rule download_task_file:
    # a release file of a local paper task, fetched on the submit host (a localrule: compute nodes are often offline)
    # or on the site's download partition
    output:
        "resources/paper_tasks/{task}/{file}",
    log:
        run_path("logs/download_task_file/{task}/{file}.log"),
    wildcard_constraints:
        task="|".join(PLAN.local_tasks) or "(?!)",
    retries: 2
    localrule: DOWNLOADS_LOCAL
    resources:
        **rule_resources("download_task_file", 4000, 60),
    params:
        repo=lambda wc: PLAN.local_tasks[wc.task]["repo"],
        revision=lambda wc: PLAN.local_tasks[wc.task].get("revision"),
    script:
        "../scripts/download_task_file.py"


rule dllm_local_tasks:
    input:
        [p for t in PLAN.local_tasks for p in PLAN.local_task_files(t)],
    output:
        yamls=PLAN.local_task_yamls(),
        data=expand(run_path("resources/dllm/local_tasks/data/{task}_test.jsonl"), task=list(PLAN.local_tasks)),
        utils=run_path("resources/dllm/local_tasks/utils.py"),
    log:
        run_path("logs/dllm/local_tasks.log"),
    localrule: True
    params:
        local=PLAN.local_task_params(),
    script:
        "../scripts/dllm_local_tasks.py"


rule dllm_data:
    input:
        yamls=PLAN.task_yamls(),
        tokenizer=run_path("resources/tokenizer"),
        toy=run_path(f"resources/tokenized/{TRAIN_DOMAIN}/train.parquet"),
    output:
        meta=run_path("resources/dllm/meta.json"),
    log:
        run_path("logs/dllm/data.log"),
    threads: 1
    resources:
        **rule_resources("dllm_data"),
    params:  # only what the data depend on (a model's training settings must not rebuild the data)
        dllm=PLAN.data_params(),
    script:
        "../scripts/dllm_data.py"


rule dllm_train:
    input:
        unpack(lambda wc: PLAN.init_inputs(wc.dmodel)),
        meta=run_path("resources/dllm/meta.json"),
    output:
        weights=run_path("results/dllm/models/{dmodel}/model.safetensors"),
        config=run_path("results/dllm/models/{dmodel}/config.json"),
    log:
        run_path("logs/train/dllm_{dmodel}.log"),
    priority: 20
    threads: config["threads"]
    resources:
        **rule_resources("dllm_train", 4000, 120, gpu=True),
    params:
        **precision_params(),
        spec=lambda wc: DLLM["models"][wc.dmodel],
        ckpt_dir=lambda wc: run_path(f"results/checkpoints/dllm_{wc.dmodel}"),
        device=config["device"],
        processes=res("dllm_train", "processes", None),  # null: resources.gpu processes on CUDA (torchrun when > 1), else 1
    script:
        "../scripts/dllm_train.py"


# `dllm.eval_job: row`: one job per Table 3 row (rule dllm_eval); `model`: one job per backbone model for all its
# rows (rules dllm_eval_{model}, PLAN.eval_groups); a row's files are the same either way (unie.config.dllm_plan)
rule dllm_eval:
    input:
        unpack(lambda wc: PLAN.row_inputs(wc.row)),
    output:
        results=run_path("results/dllm/rows/{row}/results.json"),
        throughput=run_path("results/dllm/rows/{row}/throughput.json"),
        effect=run_path("results/dllm/rows/{row}/effect.json"),
    log:
        run_path("logs/dllm/eval_{row}.log"),
    wildcard_constraints:
        row="|".join(PLAN.row_jobs) or "(?!)",
    threads: config["threads"]
    resources:  # gpu > 1 on CUDA: lm-eval data parallel, one torchrun rank per GPU
        **rule_resources("dllm_eval", 4000, 120, gpu=True),
    params:
        **JOB,
        rows=lambda wc: PLAN.eval_params([wc.row])["rows"],
        inputs=lambda wc: PLAN.eval_params([wc.row])["inputs"],
        dllm=PLAN.eval_params([])["dllm"],
    script:
        "../scripts/dllm_eval.py"


for _group, _rows in PLAN.eval_groups.items():

    rule:
        name:
            f"dllm_eval_{_group}"
        input:
            unpack(lambda wc, rows=tuple(_rows): PLAN.group_inputs(rows)),
        output:
            results=PLAN.row_outputs(_rows, "results"),
            throughput=PLAN.row_outputs(_rows, "throughput"),
            effect=PLAN.row_outputs(_rows, "effect"),
        log:
            run_path(f"logs/dllm/eval_{_group}.log"),
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **PLAN.eval_params(_rows),
            **JOB,
        script:
            "../scripts/dllm_eval.py"


# Figure 4 and the appendix k/w tables, two jobs a sweep: its lm-eval runs (one per point, all in one job beside other
# jobs: rule dllm_sweep_eval, the points' files beside lmeval.json), then their throughput (rule dllm_sweep:
# points.json, which the tables and Figure 4 read): each scored pass's own (dllm.timing.source lm_eval, the default:
# one core, nothing run) or timed again by a job that holds every core (timed: held_cores(), a GPU in the paper profile)
rule dllm_sweep_eval:
    input:
        unpack(lambda wc: PLAN.sweep_inputs(wc.sweep)),
    output:
        run_path("results/dllm/sweeps/{sweep}/lmeval.json"),
    log:
        run_path("logs/dllm/sweep_eval_{sweep}.log"),
    wildcard_constraints:
        sweep="|".join(PLAN.sweeps) or "(?!)",
    threads: config["threads"]
    resources:
        **rule_resources("dllm_sweep", 4000, 120, gpu=True),
    params:
        **JOB,
        inputs=lambda wc: PLAN.sweep_inputs(wc.sweep),
        dllm=lambda wc: PLAN.sweep_params(wc.sweep),
    script:
        "../scripts/dllm_sweep_eval.py"


rule dllm_sweep:
    input:
        unpack(lambda wc: PLAN.sweep_inputs(wc.sweep)),
        lmeval=run_path("results/dllm/sweeps/{sweep}/lmeval.json"),
    output:
        run_path("results/dllm/sweeps/{sweep}/points.json"),
    log:
        run_path("logs/dllm/sweep_{sweep}.log"),
    wildcard_constraints:
        sweep="|".join(PLAN.sweeps) or "(?!)",
    threads: held_cores() if PLAN.sweeps_timed else 1
    resources:
        **(
            rule_resources("dllm_sweep", 4000, 120, gpu=True, gpu_cpus=False)
            if PLAN.sweeps_timed
            else rule_resources("dllm_sweep_points", 1000, 10)
        ),
    params:
        **JOB,
        inputs=lambda wc: PLAN.sweep_inputs(wc.sweep),
        dllm=lambda wc: PLAN.sweep_params(wc.sweep, timed=True),
    script:
        "../scripts/dllm_sweep.py"


# The room every Algorithm 3 row had (beyond the paper; dllm.room): per backbone row, the candidate tree of the window
# on Table 3's items, each leaf scored by the task (rules dllm_room_{backbone}: results/dllm/room/{backbone}.json);
# Table 3, the full table and the selection table print its ceiling and floor beside the rows
for _backbone in PLAN.room:

    rule:
        name:
            f"dllm_room_{_backbone}"
        input:
            **PLAN.room_inputs(_backbone),
        output:
            PLAN.room_file(_backbone),
        log:
            run_path(f"logs/dllm/room_{_backbone}.log"),
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **PLAN.room_params(_backbone),
            **JOB,
        script:
            "../scripts/dllm_room.py"


rule table3:
    input:
        **PLAN.table_inputs(PLAN.table3_rows),
    output:
        tex=report(run_path("results/tables/table3_dllm.tex"), **REPORT["table3"], labels=TEX),
        csv=report(run_path("results/tables/table3_dllm.csv"), **REPORT["table3"], labels=CSV),
    log:
        run_path("logs/tables/table3_dllm.log"),
    localrule: True
    params:
        rows=PLAN.table3_rows,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table3.py"


rule table_app_dllm_full:
    # the appendix's full benchmark table: Table 3's layout with every row (the appendix-only ones: the second
    # AR of the DLLMs' size, the Llama3.1-8B analogue)
    input:
        **PLAN.table_inputs(PLAN.full_rows),
    output:
        tex=report(run_path("results/tables/table_app_dllm_full.tex"), **REPORT["table_app_dllm_full"], labels=TEX),
        csv=report(run_path("results/tables/table_app_dllm_full.csv"), **REPORT["table_app_dllm_full"], labels=CSV),
    log:
        run_path("logs/tables/table_app_dllm_full.log"),
    localrule: True
    params:
        rows=PLAN.full_rows,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table3.py"


rule table_app_selection:
    # beyond the paper: Algorithm 3 under each selection rule (argmin, resample, proxy_rerank) per backbone and energy
    input:
        **PLAN.table_inputs(PLAN.selection_rows),
    output:
        tex=report(run_path("results/tables/table_app_selection.tex"), **REPORT["table_app_selection"], labels=TEX),
        csv=report(run_path("results/tables/table_app_selection.csv"), **REPORT["table_app_selection"], labels=CSV),
    log:
        run_path("logs/tables/table_app_selection.log"),
    localrule: True
    params:
        rows=PLAN.selection_rows,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table_app_selection.py"


rule table_app_k:
    # the appendix k and w tables from their sweeps, one rule each (a rule's name is its target: snakemake -f NAME)
    input:
        PLAN.sweep_file("app_k"),
    output:
        tex=report(run_path("results/tables/table_app_k.tex"), **REPORT["table_app_k"], labels=TEX),
        csv=report(run_path("results/tables/table_app_k.csv"), **REPORT["table_app_k"], labels=CSV),
    log:
        run_path("logs/tables/table_app_k.log"),
    localrule: True
    params:
        caption=lambda wc: PLAN.sweep_caption("app_k"),
    script:
        "../scripts/table_app_sweep.py"


rule table_app_w:
    input:
        PLAN.sweep_file("app_w"),
    output:
        tex=report(run_path("results/tables/table_app_w.tex"), **REPORT["table_app_w"], labels=TEX),
        csv=report(run_path("results/tables/table_app_w.csv"), **REPORT["table_app_w"], labels=CSV),
    log:
        run_path("logs/tables/table_app_w.log"),
    localrule: True
    params:
        caption=lambda wc: PLAN.sweep_caption("app_w"),
    script:
        "../scripts/table_app_sweep.py"


rule fig4:
    input:
        PLAN.sweep_file("fig4"),
    output:
        pdf=run_path("results/figures/fig4_dllm_tradeoff.pdf"),
        png=report(run_path("results/figures/fig4_dllm_tradeoff.png"), **REPORT["fig4"], labels={"file": "figure"}),
        csv=report(
            run_path("results/figures/fig4_dllm_tradeoff.csv"), **REPORT["fig4"], labels={"file": "CSV (the points)"}
        ),
    log:
        run_path("logs/figures/fig4_dllm_tradeoff.log"),
    localrule: True
    script:
        "../scripts/fig4.py"
