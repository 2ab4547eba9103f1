# Tables: LaTeX + CSV generated from result files written by the rules above (never typed in).  Each table takes
# the files it reads, nothing else (no directory: a file created and removed beside them changes nothing); a
# deleted result file is remade by its own job, with the table (tests/test_runs.py).


def table1_inputs(wc):
    files = [
        run_path(f"results/ppl/{src}.json") for src in dict.fromkeys(config["tables"]["table1_ppl"].values()) if src
    ]
    return {"ppl": files}


rule table1:
    input:
        unpack(table1_inputs),
    output:
        tex=report(run_path("results/tables/table1_ppl.tex"), **REPORT["table1"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table1_ppl.csv"), **REPORT["table1"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table1_ppl.log"),
    localrule: True
    params:
        rows=config["tables"]["table1_ppl"],
        domains=DOMAINS,
    script:
        "../scripts/table1.py"


def table2_inputs(wc):
    runs = list(dict.fromkeys(config["tables"]["table2_genppl"].values()))
    return {"genppl": genppl_targets(runs), "samples": sample_targets(runs)}


rule table2:
    input:
        unpack(table2_inputs),
    output:
        tex=report(run_path("results/tables/table2_genppl.tex"), **REPORT["table2"], labels={"file": "LaTeX"}),
        csv=report(run_path("results/tables/table2_genppl.csv"), **REPORT["table2"], labels={"file": "CSV"}),
    log:
        run_path("logs/tables/table2_genppl.log"),
    localrule: True
    params:
        rows=config["tables"]["table2_genppl"],
        runs=config["sampling"]["runs"],
        evaluators=config["genppl"]["evaluators"],
        train_domain=TRAIN_DOMAIN,
        seq_len=config["data"]["seq_len"],
    script:
        "../scripts/table2.py"


rule partition_check:
    # brute-force check of the paper's closed-form partition (V=3, L=4, every reveal pattern)
    output:
        csv=report(run_path("results/tables/partition_check.csv"), **REPORT["partition_check"], labels={"file": "CSV"}),
        tex=report(
            run_path("results/tables/partition_check.tex"), **REPORT["partition_check"], labels={"file": "LaTeX"}
        ),
    log:
        run_path("logs/tables/partition_check.log"),
    localrule: True
    script:
        "../scripts/partition_check.py"


# The paper's numbers (config/paper_values.yaml, one place) beside the regenerated tables: orderings in the toy
# profile (the scales differ), values and differences in the paper profile.


def paper_vs_ours_tables():
    out = {
        "table1_ppl": run_path("results/tables/table1_ppl.csv"),
        "table2_genppl": run_path("results/tables/table2_genppl.csv"),
    }
    if config.get("dllm"):
        # Table 3 and the appendix's full table share their rows: the full table's CSV (every row, the
        # appendix-only Llama3.1-8B analogue too) is what Table 3's paper rows are compared with
        out["table3_dllm"] = run_path("results/tables/table_app_dllm_full.csv")
    for sweep in ("app_k", "app_w"):
        if sweep in config.get("dllm", {}).get("sweeps", {}).get("sets", {}):
            out[f"table_{sweep}"] = run_path(f"results/tables/table_{sweep}.csv")
    return out


def paper_values():
    """config/paper_values.yaml, read here: a param (its content reruns the comparison when it changes), not an input
    path (the clone's absolute path would make a copied or moved clone rerun it)."""
    from unie.config.profile import load_yaml

    return load_yaml(os.path.join(workflow.basedir, "config", "paper_values.yaml"))


rule paper_vs_ours:
    input:
        **paper_vs_ours_tables(),
    output:
        md=report(run_path("results/tables/paper_vs_ours.md"), **REPORT["paper_vs_ours"], labels={"file": "Markdown"}),
        tex=report(run_path("results/tables/paper_vs_ours.tex"), **REPORT["paper_vs_ours"], labels={"file": "LaTeX"}),
        csv=report(
            run_path("results/tables/paper_vs_ours.csv"), **REPORT["paper_vs_ours"], labels={"file": "CSV (long)"}
        ),
    log:
        run_path("logs/tables/paper_vs_ours.log"),
    localrule: True
    params:
        values=paper_values(),
        tables=list(paper_vs_ours_tables()),
        profile=config["profile"],
        evaluators=list(config["genppl"]["evaluators"]),
        steps=list(config["sampling"]["steps"]),
    script:
        "../scripts/paper_vs_ours.py"
