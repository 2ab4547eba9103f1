# Tables: LaTeX + CSV generated from result files written by the rules above (never typed in).


def table1_inputs(wc):
    return [f"results/ppl/{src}.json" for src in dict.fromkeys(config["tables"]["table1_ppl"].values())]


rule table1_ppl:
    input:
        table1_inputs,
    output:
        tex="results/tables/table1_ppl.tex",
        csv="results/tables/table1_ppl.csv",
    log:
        "logs/tables/table1_ppl.log",
    params:
        rows=config["tables"]["table1_ppl"],
        domains=DOMAINS,
    localrule: True
    script:
        "../scripts/table1.py"


rule table2_genppl:
    input:
        lambda wc: genppl_targets(list(dict.fromkeys(config["tables"]["table2_genppl"].values()))),
    output:
        tex="results/tables/table2_genppl.tex",
        csv="results/tables/table2_genppl.csv",
    log:
        "logs/tables/table2_genppl.log",
    params:
        rows=config["tables"]["table2_genppl"],
        runs=config["sampling"]["runs"],
        evaluators=config["genppl"]["evaluators"],
    localrule: True
    script:
        "../scripts/table2.py"
