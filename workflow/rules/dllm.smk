# The DLLM half (Table 3): toy benchmarks as local lm-eval tasks, the tiny LLaDA-like and Dream-like backbones,
# the AR rows and the proxy, one lm-eval run per Table 3 row, and the table.  Every path below is in the run's
# directory (run_path, common.smk); the Hugging Face checkpoints (resources/hf/) and task files are shared downloads.
#
#   resources/dllm/tasks/            lm-eval task YAMLs + JSONL (rule dllm_tasks)
#   resources/dllm/meta.json         tokenizers and training tensors (rule dllm_data)
#   results/dllm/models/{dmodel}/    trained DLLM-half models (rule dllm_train)
#   results/dllm/rows/{row}/         lm-eval's results_*.json, samples_*.jsonl, throughput.json, effect.json (the
#                                    row against its backbone: paired change, window disagreement) (rule
#                                    dllm_eval, or dllm_eval_{model} for all rows of a model)
#   results/tables/table3_dllm.*     Table 3 (rows without appendix_only / selection_table); table_app_dllm_full.*:
#                                    those and the appendix_only ones; table_app_selection.*: the selection rules

DLLM = config.get("dllm", {})
DLLM_MODELS = list(DLLM.get("models", {}))
DLLM_ROWS = list(DLLM.get("rows", {}))
# Table 3's rows; the appendix's full table (table_app_dllm_full) has the appendix-only ones too; the selection-rule
# table (table_app_selection) has the selection_table rows with their backbones and Table 3's energy rows
FULL_ROWS = {name: row for name, row in DLLM.get("rows", {}).items() if not row.get("selection_table")}
TABLE3_ROWS = {name: row for name, row in FULL_ROWS.items() if not row.get("appendix_only")}


from unie.dllm.rows import selection_rows  # noqa: E402

SELECTION_ROWS = selection_rows(DLLM)
TOY_TASKS = DLLM.get("tasks", {}).get("source", "toy") == "toy"
# what the task files and the training data depend on (not which columns Table 3 averages)
TASK_DATA = {k: v for k, v in DLLM.get("tasks", {}).items() if k != "average"}
from unie.data.tasks import FORMAT as TASK_FORMAT  # noqa: E402

LOCAL_TASKS = DLLM.get("tasks", {}).get(
    "local", {}
)  # paper profile: LiveCodeBench v2 (lm-eval lacks it), MBPP (offline)
# lm-eval's built-in tasks (paper profile: minerva_math500, gsm8k): rule prefetch_lmeval (prefetch.smk) loads each once
# on the submit host, its Python helpers and its dataset; every lm-eval job reads its record, so a package that is
# not installed, or a dataset that is not in HF_HOME, stops the run there, before any GPU job starts
from unie.pipeline.prefetch import LMEVAL_RECORD, lmeval_tasks_read  # noqa: E402

LMEVAL_TASKS_READ = {"lmeval_tasks": run_path(LMEVAL_RECORD)} if lmeval_tasks_read(config) else {}


def local_task_files(task):
    return [f"resources/paper_tasks/{task}/{f}" for f in LOCAL_TASKS[task]["files"]]


wildcard_constraints:
    dmodel="|".join(DLLM_MODELS) or "(?!)",
    row="|".join(DLLM_ROWS) or "(?!)",


rule dllm_tasks:
    output:
        yamls=expand(run_path("resources/dllm/tasks/{task}.yaml"), task=DLLM.get("tasks", {}).get("names", [])),
        utils=run_path("resources/dllm/tasks/utils.py"),
    log:
        run_path("logs/dllm/tasks.log"),
    threads: 1
    resources:
        **rule_resources("dllm_tasks"),
    params:
        tasks=TASK_DATA,
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
        task="|".join(LOCAL_TASKS) or "(?!)",
    retries: 2
    localrule: DOWNLOADS_LOCAL
    resources:
        **rule_resources("download_task_file", 4000, 60),
    params:
        repo=lambda wc: LOCAL_TASKS[wc.task]["repo"],
        revision=lambda wc: LOCAL_TASKS[wc.task].get("revision"),
    script:
        "../scripts/download_task_file.py"


rule dllm_local_tasks:
    input:
        [p for t in LOCAL_TASKS for p in local_task_files(t)],
    output:
        yamls=expand(run_path("resources/dllm/local_tasks/{task}.yaml"), task=list(LOCAL_TASKS)),
        data=expand(run_path("resources/dllm/local_tasks/data/{task}_test.jsonl"), task=list(LOCAL_TASKS)),
        utils=run_path("resources/dllm/local_tasks/utils.py"),
    log:
        run_path("logs/dllm/local_tasks.log"),
    localrule: True
    params:
        local={t: {**spec, "files": local_task_files(t)} for t, spec in LOCAL_TASKS.items()},
    script:
        "../scripts/dllm_local_tasks.py"


rule dllm_data:
    input:
        yamls=rules.dllm_tasks.output.yamls,
        tokenizer=run_path("resources/tokenizer"),
        toy=f"{RUN_DIR}/resources/tokenized/{TRAIN_DOMAIN}/train.parquet",
    output:
        meta=run_path("resources/dllm/meta.json"),
    log:
        run_path("logs/dllm/data.log"),
    threads: 1
    resources:
        **rule_resources("dllm_data"),
    params:  # only what the data depend on (a model's training settings must not rebuild the data)
        dllm={
            "tasks": TASK_DATA,
            **{k: DLLM.get(k) for k in ("pretrain_texts", "bpe_vocab_size", "decoding", "sft_length")},
        },
    script:
        "../scripts/dllm_data.py"


def dllm_init(wc):
    init = DLLM["models"][wc.dmodel].get("init_from")
    if not init:
        return {}
    if init in DLLM_MODELS:
        return {"init": f"{RUN_DIR}/results/dllm/models/{init}/model.safetensors"}
    return {"init": model_files(init)[0], "init_tokenizer": run_path("resources/tokenizer")}  # a DLM-half model


rule dllm_train:
    input:
        unpack(dllm_init),
        meta=run_path("resources/dllm/meta.json"),
    output:
        weights=run_path("results/dllm/models/{dmodel}/model.safetensors"),
        config=run_path("results/dllm/models/{dmodel}/config.json"),
    log:
        run_path("logs/train/dllm_{dmodel}.log"),
    benchmark:
        run_path("benchmarks/train/dllm_{dmodel}.tsv")
    priority: 20
    threads: config["threads"]
    resources:
        **rule_resources("dllm_train", 4000, 120, gpu=True),
    params:
        **precision_params(),
        spec=lambda wc: DLLM["models"][wc.dmodel],
        ckpt_dir=lambda wc: f"{RUN_DIR}/results/checkpoints/dllm_{wc.dmodel}",
        device=config["device"],
        processes=res("dllm_train", "processes", None),  # null: resources.gpu processes on CUDA (torchrun when > 1), else 1
    script:
        "../scripts/dllm_train.py"


def row_inputs(name):
    """The files a Table 3 row reads: the tasks, its model (and proxy), its backbone row's results (delta_to)."""
    row = DLLM["rows"][name]
    out = {"tasks": rules.dllm_tasks.output.yamls} if TOY_TASKS else dict(LMEVAL_TASKS_READ)
    if LOCAL_TASKS:
        out["local_tasks"] = rules.dllm_local_tasks.output.yamls
    for role in ("model", "proxy"):
        name = row.get(role)
        if name in DLLM_MODELS:
            out[role] = f"{RUN_DIR}/results/dllm/models/{name}/model.safetensors"
        elif name:
            out[role] = f"resources/hf/{name}"  # a Hugging Face checkpoint (paper profile)
    if row.get("delta_to"):  # effect.json compares the row with its backbone on the same items
        out["base"] = f"{RUN_DIR}/results/dllm/rows/{row['delta_to']}/results.json"
    return out


def dllm_eval_params(rows):
    """A job's rows (name -> spec), each with the files it reads, and the shared settings they read (not the other
    rows' or the models' settings)."""
    return dict(
        rows={name: DLLM["rows"][name] for name in rows},
        inputs={name: plain_files(row_inputs(name)) for name in rows},
        dllm={
            k: DLLM.get(k)
            for k in ("tasks", "decoding", "energy", "batch_size", "include_default_tasks", "limit", "seed")
        },
        device=config["device"],
        **precision_params(),
    )


def row_outputs(rows, kind):
    return [f"{RUN_DIR}/results/dllm/rows/{name}/{kind}.json" for name in rows]


# `dllm.eval_job: row` (default; the paper profile: hours per row on a GPU): one job per Table 3 row (rule
# dllm_eval).  `dllm.eval_job: model` (the toy profile, where a row is seconds and starting Python, torch and
# lm-eval costs ~4 s): one job per backbone model for all its rows in one process (rules dllm_eval_{model}), the
# backbone row before the rows compared with it; a row's files are the same either way.
from unie.dllm.rows import eval_groups  # noqa: E402

EVAL_GROUPS = eval_groups(DLLM.get("rows", {})) if SETTINGS.dllm_eval_job == "model" else {}
ROW_JOBS = [] if EVAL_GROUPS else DLLM_ROWS  # eval_groups puts every row in exactly one group


rule dllm_eval:
    input:
        unpack(lambda wc: row_inputs(wc.row)),
    output:
        results=run_path("results/dllm/rows/{row}/results.json"),
        throughput=run_path("results/dllm/rows/{row}/throughput.json"),
        effect=run_path("results/dllm/rows/{row}/effect.json"),
    log:
        run_path("logs/dllm/eval_{row}.log"),
    benchmark:
        run_path("benchmarks/dllm/eval_{row}.tsv")
    wildcard_constraints:
        row="|".join(ROW_JOBS) or "(?!)",
    threads: config["threads"]
    resources:  # gpu > 1 on CUDA: lm-eval data parallel, one torchrun rank per GPU
        **rule_resources("dllm_eval", 4000, 120, gpu=True),
    params:
        **{k: (lambda wc, k=k: dllm_eval_params([wc.row])[k]) for k in ("rows", "inputs")},
        **{k: v for k, v in dllm_eval_params([]).items() if k not in ("rows", "inputs")},
    script:
        "../scripts/dllm_eval.py"


for _group, _rows in EVAL_GROUPS.items():

    rule:
        name:
            f"dllm_eval_{_group}"
        input:
            # the rows' files, less the results of rows this job writes itself
            unpack(
                lambda wc, rows=tuple(_rows): {
                    f"{name}_{k}": v
                    for name in rows
                    for k, v in row_inputs(name).items()
                    if not (k == "base" and DLLM["rows"][name]["delta_to"] in rows)
                }
            ),
        output:
            results=row_outputs(_rows, "results"),
            throughput=row_outputs(_rows, "throughput"),
            effect=row_outputs(_rows, "effect"),
        log:
            f"{RUN_DIR}/logs/dllm/eval_{_group}.log",
        benchmark:
            f"{RUN_DIR}/benchmarks/dllm/eval_{_group}.tsv"
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **dllm_eval_params(_rows),
        script:
            "../scripts/dllm_eval.py"


SWEEPS = list(DLLM.get("sweeps", {}).get("sets", {}))


def sweep_inputs(sweep):
    out = {"tasks": rules.dllm_tasks.output.yamls} if TOY_TASKS else dict(LMEVAL_TASKS_READ)
    if LOCAL_TASKS:
        out["local_tasks"] = rules.dllm_local_tasks.output.yamls
    for curve, spec in DLLM["sweeps"]["sets"][sweep].items():
        for role in ("model", "proxy"):
            name = spec.get(role)
            if name:
                out[f"{curve}_{role}"] = (
                    f"{RUN_DIR}/results/dllm/models/{name}/model.safetensors"
                    if name in DLLM_MODELS
                    else f"resources/hf/{name}"
                )
    return out


def sweep_params(sweeps):
    return dict(
        sweeps={s: plain_files(sweep_inputs(s)) for s in sweeps},  # each sweep's files
        dllm={
            "tasks": TASK_DATA,
            **{
                k: DLLM.get(k)
                for k in ("decoding", "energy", "batch_size", "include_default_tasks", "limit", "seed", "sweeps")
            },
        },
        device=config["device"],
        **precision_params(),
    )


# `dllm.eval_job: model`: every sweep in one job (rule dllm_sweeps: lm-eval, torch and the models imported once,
# every core held once); else one job per sweep (rule dllm_sweep).  The same files either way.
SWEEP_JOB = SWEEPS if SETTINGS.dllm_eval_job == "model" else []


rule dllm_sweep:
    # Figure 4 and the appendix k/w tables: one lm-eval run per point on one task, all points of a sweep in one
    # job (lm-eval and the models imported once); it holds every core (throughput is timed): held_cores()
    input:
        unpack(lambda wc: sweep_inputs(wc.sweep)),
    output:
        # the points' lm-eval files are written beside it, in the same folder (tables and Figure 4 read points.json)
        run_path("results/dllm/sweeps/{sweep}/points.json"),
    log:
        run_path("logs/dllm/sweep_{sweep}.log"),
    benchmark:
        run_path("benchmarks/dllm/sweep_{sweep}.tsv")
    wildcard_constraints:
        sweep="|".join(s for s in SWEEPS if s not in SWEEP_JOB) or "(?!)",
    threads: held_cores()
    resources:
        **rule_resources("dllm_sweep", 4000, 120, gpu=True, gpu_cpus=False),
    params:
        **{k: v for k, v in sweep_params([]).items() if k != "sweeps"},
        sweeps=lambda wc: sweep_params([wc.sweep])["sweeps"],
    script:
        "../scripts/dllm_sweep.py"


if SWEEP_JOB:

    rule dllm_sweeps:
        input:
            unpack(lambda wc: {f"{s}_{k}": v for s in SWEEP_JOB for k, v in sweep_inputs(s).items()}),
        output:
            [f"{RUN_DIR}/results/dllm/sweeps/{s}/points.json" for s in SWEEP_JOB],
        log:
            run_path("logs/dllm/sweeps.log"),
        benchmark:
            run_path("benchmarks/dllm/sweeps.tsv")
        threads: held_cores()
        resources:
            **rule_resources("dllm_sweep", 4000, 120, gpu=True, gpu_cpus=False),
        params:
            **sweep_params(SWEEP_JOB),
        script:
            "../scripts/dllm_sweep.py"


# The room every Algorithm 3 row had (beyond the paper; dllm.room): per backbone row, the candidate tree of the window
# on Table 3's items, each leaf scored by the task (rules dllm_room_{backbone}: results/dllm/room/{backbone}.json);
# Table 3, the full table and the selection table print its ceiling and floor beside the rows
from unie.dllm.rows import room_rows  # noqa: E402

ROOM = room_rows(DLLM.get("rows", {})) if DLLM.get("room") else {}


def room_inputs(backbone):
    names = [backbone, *ROOM[backbone]]
    out = {f"{n}_{k}": v for n in names for k, v in row_inputs(n).items() if k != "base"}
    out.update({f"{n}_results": f"{RUN_DIR}/results/dllm/rows/{n}/results.json" for n in names})
    return out


for _backbone in ROOM:

    rule:
        name:
            f"dllm_room_{_backbone}"
        input:
            **room_inputs(_backbone),
        output:
            f"{RUN_DIR}/results/dllm/room/{_backbone}.json",
        log:
            f"{RUN_DIR}/logs/dllm/room_{_backbone}.log",
        benchmark:
            f"{RUN_DIR}/benchmarks/dllm/room_{_backbone}.tsv"
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **precision_params(),
            backbone=_backbone,
            rows={n: DLLM["rows"][n] for n in ROOM[_backbone]},
            inputs={n: plain_files(row_inputs(n)) for n in ROOM[_backbone]},
            dllm={k: DLLM.get(k) for k in ("tasks", "decoding", "energy", "batch_size", "seed", "room")},
            device=config["device"],
        script:
            "../scripts/dllm_room.py"


def room_files(rows):
    """The room records of the backbones of ``rows`` (a table's rows)."""
    return [f"{RUN_DIR}/results/dllm/room/{b}.json" for b in ROOM if b in rows or any(r in rows for r in ROOM[b])]


def table3_inputs(rows):
    files = [f"{RUN_DIR}/results/dllm/rows/{row}/results.json" for row in rows]
    effects = [f"{RUN_DIR}/results/dllm/rows/{row}/effect.json" for row in rows if rows[row].get("delta_to")]
    # a decoder row's paired s.e. is in its effect.json; its room (ceiling, floor) in its backbone's room record
    return {"results": files, "effects": effects, "rooms": room_files(rows)}


rule table3:
    input:
        unpack(lambda wc: table3_inputs(TABLE3_ROWS)),
    output:
        tex=report(run_path("results/tables/table3_dllm.tex"), **REPORT["table3"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table3_dllm.csv"), **REPORT["table3"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table3_dllm.log"),
    localrule: True
    params:
        rows=TABLE3_ROWS,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table3.py"


rule table_app_dllm_full:
    # the appendix's full benchmark table: Table 3's layout with every row (the appendix-only ones: the second
    # AR of the DLLMs' size, the Llama3.1-8B analogue)
    input:
        unpack(lambda wc: table3_inputs(FULL_ROWS)),
    output:
        tex=report(
            run_path("results/tables/table_app_dllm_full.tex"),
            **REPORT["table_app_dllm_full"],
            labels={"file": "LaTeX"},
        ),
        csv=report(
            run_path("results/tables/table_app_dllm_full.csv"), **REPORT["table_app_dllm_full"], labels={"file": "CSV"}
        ),
    log:
        run_path("logs/tables/table_app_dllm_full.log"),
    localrule: True
    params:
        rows=FULL_ROWS,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table3.py"


rule table_app_selection:
    # beyond the paper: Algorithm 3 under each selection rule (argmin, resample, proxy_rerank) per backbone and energy
    input:
        unpack(lambda wc: table3_inputs(SELECTION_ROWS)),
    output:
        tex=report(
            run_path("results/tables/table_app_selection.tex"),
            **REPORT["table_app_selection"],
            labels={"file": "LaTeX"},
        ),
        csv=report(
            run_path("results/tables/table_app_selection.csv"), **REPORT["table_app_selection"], labels={"file": "CSV"}
        ),
    log:
        run_path("logs/tables/table_app_selection.log"),
    localrule: True
    params:
        rows=SELECTION_ROWS,
        tasks=DLLM.get("tasks", {}),
    script:
        "../scripts/table_app_selection.py"


def sweep_caption(sweep):
    """The caption of an appendix k/w table: what is fixed and what varies (from the config)."""
    parts = []
    for curve, spec in DLLM["sweeps"]["sets"][sweep].items():
        ((key, values),) = spec["vary"].items()
        fixed = ", ".join(
            f"{k}={v}" for k, v in {**DLLM.get("energy", {}), **spec.get("options", {})}.items() if k != key
        )
        parts.append(f"{spec.get('label', curve)} on {spec['model']} ({fixed}), {key} varied")
    return (
        f"{DLLM['sweeps']['task']}: " + "; ".join(parts) + f". Accuracy $\\pm$ its s.e. (lm-eval), "
        f"throughput in generated tokens/s (batch {DLLM['batch_size']}, warm-up and loading excluded)."
    )


# the appendix k and w tables from their sweeps: one rule each (a rule's name is its target: snakemake -f table_app_k)


rule table_app_k:
    input:
        run_path("results/dllm/sweeps/app_k/points.json"),
    output:
        tex=report(run_path("results/tables/table_app_k.tex"), **REPORT["table_app_k"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table_app_k.csv"), **REPORT["table_app_k"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table_app_k.log"),
    localrule: True
    params:
        caption=lambda wc: sweep_caption("app_k"),
    script:
        "../scripts/table_app_sweep.py"


rule table_app_w:
    input:
        run_path("results/dllm/sweeps/app_w/points.json"),
    output:
        tex=report(run_path("results/tables/table_app_w.tex"), **REPORT["table_app_w"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table_app_w.csv"), **REPORT["table_app_w"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table_app_w.log"),
    localrule: True
    params:
        caption=lambda wc: sweep_caption("app_w"),
    script:
        "../scripts/table_app_sweep.py"


rule fig4:
    input:
        run_path("results/dllm/sweeps/fig4/points.json"),
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


# ---------------------------------------------------------------------------------------------------------------
# Beyond the paper: when does Uni-E help a DLLM?  The proxy-strength map (config dllm.map; not in `all`, targets
# table_app_map and fig_app_map): per backbone, Algorithm 3's energies (Ind/Inv/Uni-E with argmin and resample),
# proxy_rerank and APD at each candidate temperature with proxies from weak to an oracle that knows the answers,
# each point's paired change against the backbone on the same items.
#
#   resources/dllm/oracle/          the eps-smoothed oracle proxy of the toy tasks' test items (rule dllm_oracle)
#   results/dllm/map/{job}/         one lm-eval run per point, points.json (rules dllm_map_{job}: a backbone, or
#                                   `proxies`: the ARs decoded alone)
#   results/tables/table_app_map.*, results/figures/fig_app_map.*

DLLM_MAP = DLLM.get("map") or {}
MAP_JOBS = [*DLLM_MAP.get("backbones", {}), "proxies"] if DLLM_MAP else []
ORACLE = "oracle"  # a map proxy whose model is this name reads the oracle checkpoint


rule dllm_oracle:
    # the oracle proxy: every test item's reference answer, read through the word tokenizer
    input:
        yamls=rules.dllm_tasks.output.yamls,
        meta=run_path("resources/dllm/meta.json"),
    output:
        run_path("resources/dllm/oracle/oracle.json"),
    log:
        run_path("logs/dllm/oracle.log"),
    localrule: True
    params:
        eps=DLLM_MAP.get("oracle_eps", 0.05),
        tasks=DLLM_MAP.get("tasks", []),
    script:
        "../scripts/dllm_oracle.py"


def map_model_path(name):
    if name == ORACLE:
        return run_path("resources/dllm/oracle/oracle.json")
    return f"{RUN_DIR}/results/dllm/models/{name}/model.safetensors"


def map_inputs(job):
    """The files of one map job: the tasks, the backbone (or the ARs), every proxy of the map."""
    models = (
        [DLLM_MAP["backbones"][job]["model"], *(p["model"] for p in DLLM_MAP["proxies"].values())]
        if job != "proxies"
        else [p["model"] for p in DLLM_MAP["proxies"].values() if p["model"] != ORACLE]
    )
    return {"tasks": rules.dllm_tasks.output.yamls, **{f"model_{m}": map_model_path(m) for m in dict.fromkeys(models)}}


for _job in MAP_JOBS:

    rule:
        name:
            f"dllm_map_{_job}"
        input:
            **map_inputs(_job),
        output:
            f"{RUN_DIR}/results/dllm/map/{_job}/points.json",
        log:
            f"{RUN_DIR}/logs/dllm/map_{_job}.log",
        benchmark:
            f"{RUN_DIR}/benchmarks/dllm/map_{_job}.tsv"
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **precision_params(),
            job=_job,
            models={
                m: os.path.dirname(map_model_path(m))
                for m in [k[len("model_") :] for k in map_inputs(_job) if k.startswith("model_")]
            },
            dllm={k: DLLM.get(k) for k in ("decoding", "energy", "batch_size", "seed", "map", "models")},
            device=config["device"],
        script:
            "../scripts/dllm_map.py"


rule table_app_map:
    input:
        [f"{RUN_DIR}/results/dllm/map/{j}/points.json" for j in MAP_JOBS],
    output:
        tex=report(run_path("results/tables/table_app_map.tex"), **REPORT["table_app_map"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table_app_map.csv"), **REPORT["table_app_map"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table_app_map.log"),
    localrule: True
    script:
        "../scripts/table_app_map.py"


rule fig_app_map:
    input:
        [f"{RUN_DIR}/results/dllm/map/{j}/points.json" for j in MAP_JOBS],
    output:
        pdf=run_path("results/figures/fig_app_map.pdf"),
        png=report(run_path("results/figures/fig_app_map.png"), **REPORT["fig_app_map"], labels={"file": "figure"}),
        csv=report(
            run_path("results/figures/fig_app_map.csv"), **REPORT["fig_app_map"], labels={"file": "CSV (the points)"}
        ),
    log:
        run_path("logs/figures/fig_app_map.log"),
    localrule: True
    script:
        "../scripts/fig_app_map.py"
