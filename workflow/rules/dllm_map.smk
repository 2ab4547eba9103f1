# Beyond the paper: when does Uni-E help a DLLM?  The proxy-strength map (config dllm.map; not in `all`, targets
# table_app_map and fig_app_map): per backbone, Algorithm 3's energies (Ind/Inv/Uni-E with argmin and resample),
# proxy_rerank and APD at each candidate temperature with proxies from weak to an oracle that knows the answers,
# each point's paired change against the backbone on the same items.  It reads the DLLM half's tasks and models
# (dllm.smk: PLAN, unie.config.dllm_plan; JOB, TEX, CSV).
#
#   resources/dllm/map_tasks/       the map's own tasks (rule dllm_map_tasks, with dllm.map.items): more test items per
#                                   task than Table 3's, drawn by the same generator (its first ones are Table 3's)
#   resources/dllm/oracle/          the eps-smoothed oracle proxy of the map's test items (rule dllm_oracle)
#   results/dllm/map/{job}/         one lm-eval run per point (rules dllm_map_{job}: a backbone, or `proxies`: the
#                                   ARs decoded alone), and the record: lmeval.json (a backbone's points) or points.json
#   results/dllm/map/{backbone}/trees/{tree}.json   one candidate tree (a draw and a window) each, decoded from the
#                                   backbone's logged requests (rules dllm_map_tree_{backbone}: jobs that share the cores)
#   results/dllm/map/{backbone}/points.json         its points with its trees (rules dllm_map_points_{backbone})
#   results/tables/table_app_map.*, results/figures/fig_app_map.*

import re

if PLAN.map.get("items"):

    rule dllm_map_tasks:
        # the map's tasks: dllm.map.items test items each (Table 3's first), no training split
        output:
            yamls=PLAN.map_task_yamls(),
            utils=run_path("resources/dllm/map_tasks/utils.py"),
        log:
            run_path("logs/dllm/map_tasks.log"),
        localrule: True
        params:
            **PLAN.map_task_params(),
            answers=TASK_FORMAT,  # the answers' format (unie.data.tasks.FORMAT): another format writes them again
        script:
            "../scripts/dllm_map_tasks.py"


rule dllm_oracle:
    # the oracle proxy: every map test item's reference answer, read through the word tokenizer
    input:
        yamls=PLAN.map_task_yamls(),
        meta=run_path("resources/dllm/meta.json"),
    output:
        run_path("resources/dllm/oracle/oracle.json"),
    log:
        run_path("logs/dllm/oracle.log"),
    localrule: True
    params:
        eps=PLAN.map.get("oracle_eps", 0.05),
        tasks=PLAN.map.get("tasks", []),
    script:
        "../scripts/dllm_oracle.py"


for _job in PLAN.map_jobs:

    rule:
        name:
            f"dllm_map_{_job}"
        input:
            **PLAN.map_inputs(_job),
        output:
            PLAN.map_points_file(_job),
        log:
            run_path(f"logs/dllm/map_{_job}.log"),
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **PLAN.map_params(_job),
            **JOB,
        script:
            "../scripts/dllm_map.py"


for _b in PLAN.map_backbones:

    rule:
        # one candidate tree of the backbone's window: a draw and a window of the map (unie.dllm.rows.map_tree_grid)
        name:
            f"dllm_map_tree_{_b}"
        input:
            **PLAN.map_inputs(_b),
            lmeval=PLAN.map_points_file(_b),
        output:
            PLAN.map_tree_file(_b, "{tree}"),
        log:
            run_path(f"logs/dllm/map_{_b}_{{tree}}.log"),
        wildcard_constraints:
            tree="|".join(re.escape(t) for t in PLAN.map_tree_names),
        threads: config["threads"]
        resources:
            **rule_resources("dllm_eval", 4000, 120, gpu=True),
        params:
            **PLAN.map_params(_b),
            **JOB,
        script:
            "../scripts/dllm_map_tree.py"

    rule:
        name:
            f"dllm_map_points_{_b}"
        input:
            lmeval=PLAN.map_points_file(_b),
            trees=PLAN.map_tree_files(_b),
        output:
            PLAN.map_file(_b),
        log:
            run_path(f"logs/dllm/map_points_{_b}.log"),
        localrule: True
        script:
            "../scripts/dllm_map_points.py"


rule table_app_map:
    input:
        [PLAN.map_file(j) for j in PLAN.map_jobs],
    output:
        tex=report(run_path("results/tables/table_app_map.tex"), **REPORT["table_app_map"], labels=TEX),
        csv=report(run_path("results/tables/table_app_map.csv"), **REPORT["table_app_map"], labels=CSV),
    log:
        run_path("logs/tables/table_app_map.log"),
    localrule: True
    script:
        "../scripts/table_app_map.py"


rule fig_app_map:
    input:
        [PLAN.map_file(j) for j in PLAN.map_jobs],
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
