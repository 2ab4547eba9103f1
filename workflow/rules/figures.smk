# Figures: matplotlib plots generated from result files written by the sampling rules.


def fig2_inputs(wc):
    fig = config["figures"]["fig2_ablation"]
    runs = [fig["baseline"]] + [run for by_energy in FACTS.fig2_runs.values() for run in by_energy.values()]
    return {"genppl": genppl_targets(runs), "samples": sample_targets(runs)}


rule fig2:
    input:
        unpack(fig2_inputs),
    output:
        pdf=run_path("results/figures/fig2_ablation.pdf"),
        png=report(run_path("results/figures/fig2_ablation.png"), **REPORT["fig2"], labels={"file": "figure"}),
        csv=report(run_path("results/figures/fig2_ablation.csv"), **REPORT["fig2"], labels={"file": "CSV (the points)"}),
    log:
        run_path("logs/figures/fig2_ablation.log"),
    localrule: True
    params:
        fig=dict(config.get("figures", {}).get("fig2_ablation") or {}, runs=FACTS.fig2_runs),
    script:
        "../scripts/fig2.py"


# Figure 3: the K and w sweeps (Gen PPL vs steps) and the quality / wall-clock trade-off.  The wall-clock comes
# from rule timing (one batch, warm-up excluded, median of repeats), whose jobs hold every core of the machine
# (on a CPU) so that no other job runs beside them; the sampling rules' own `seconds` are not comparable.


def fig3_inputs(wc):
    panels = FACTS.fig3_runs
    runs = list(dict.fromkeys([*panels["k"].values(), *panels["w"].values(), *panels["tradeoff"].values()]))
    return {
        "genppl": genppl_targets(runs),
        "timing": [run_path(f"results/timing/{r}.json") for r in panels["tradeoff"].values()],
    }


def timing_params(run):
    return dict(
        spec=config["sampling"]["runs"][run],
        steps=FACTS.run_steps[run],
        inputs=plain_files({k: v for k, v in run_inputs(run).items() if k != "data"}),
    )


# `sampling.job: table`: the runs Figure 3 times in one job (rule timing_fig3: lm-eval-free, torch imported once,
# every core held once); else one job per run (rule timing).  The same files either way.
TIMED_RUNS = (
    list(dict.fromkeys(FACTS.fig3_runs["tradeoff"].values()))
    if SETTINGS.sampling_job == "table" and config.get("figures", {}).get("fig3_tradeoff")
    else []
)


rule timing:
    input:
        unpack(lambda wc: {k: v for k, v in sample_inputs(wc).items() if k != "data"}),
    output:
        run_path("results/timing/{run}.json"),
    log:
        run_path("logs/timing/{run}.log"),
    wildcard_constraints:
        run="|".join(r for r in RUNS if r not in TIMED_RUNS) or "(?!)",
    # on a CPU the job holds every core of a local run (nothing runs beside a timed run): held_cores()
    threads: held_cores()
    resources:
        **rule_resources("timing", 4000, 60, gpu=True),
    params:
        **precision_params(),
        runs=lambda wc: {wc.run: timing_params(wc.run)},
        timing=lambda wc: config["figures"]["fig3_tradeoff"]["timing"],
        seq_len=config["data"]["seq_len"],
        seed=config["seed"],
        train_domain=TRAIN_DOMAIN,
        device=config["device"],
    script:
        "../scripts/timing.py"


if TIMED_RUNS:

    rule timing_fig3:
        input:
            unpack(lambda wc: {f"{r}_{k}": v for r in TIMED_RUNS for k, v in run_inputs(r).items() if k != "data"}),
        output:
            [run_path(f"results/timing/{r}.json") for r in TIMED_RUNS],
        log:
            run_path("logs/timing/fig3.log"),
        threads: held_cores()
        resources:
            **rule_resources("timing", 4000, 60, gpu=True),
        params:
            **precision_params(),
            runs={r: timing_params(r) for r in TIMED_RUNS},
            timing=config["figures"]["fig3_tradeoff"]["timing"],
            seq_len=config["data"]["seq_len"],
            seed=config["seed"],
            train_domain=TRAIN_DOMAIN,
            device=config["device"],
        script:
            "../scripts/timing.py"


rule fig3:
    input:
        unpack(fig3_inputs),
    output:
        pdf=run_path("results/figures/fig3_tradeoff.pdf"),
        png=report(run_path("results/figures/fig3_tradeoff.png"), **REPORT["fig3"], labels={"file": "figure"}),
        csv=report(run_path("results/figures/fig3_tradeoff.csv"), **REPORT["fig3"], labels={"file": "CSV (the points)"}),
        summary=report(
            run_path("results/figures/fig3_tradeoff.json"),
            **REPORT["fig3"],
            labels={"file": "JSON (the paper's claims, measured)"},
        ),
    log:
        run_path("logs/figures/fig3_tradeoff.log"),
    localrule: True
    params:
        fig=dict(config.get("figures", {}).get("fig3_tradeoff") or {}, runs=FACTS.fig3_runs),
    script:
        "../scripts/fig3.py"


# The four appendix case studies (toy world only: the cases are picked by the exact distribution pi).
CASES = ("invariant", "independent", "non_invariant", "non_independent")


rule cases:
    input:
        tokenizer=run_path("resources/tokenizer"),
        dlm=lambda wc: model_files(config["figures"]["case_studies"]["dlm"]),
        proxy=lambda wc: model_files(config["figures"]["case_studies"]["proxy"]),
    output:
        **{f"{c}_pdf": run_path(f"results/figures/case_{c}.pdf") for c in CASES},
        **{
            f"{c}_png": report(
                run_path(f"results/figures/case_{c}.png"), **REPORT["cases"], labels={"file": f"case: {c}"}
            )
            for c in CASES
        },
        json=report(
            run_path("results/figures/case_studies.json"), **REPORT["cases"], labels={"file": "JSON (the samples)"}
        ),
    log:
        run_path("logs/figures/case_studies.log"),
    threads: config["threads"]
    resources:
        **rule_resources("case_studies", 4000, 30),
    params:
        cfg=lambda wc: config["figures"]["case_studies"],
        seq_len=config["data"]["seq_len"],
        train_domain=TRAIN_DOMAIN,
        source=config["data"]["source"],
        device=config["device"],
    script:
        "../scripts/case_studies.py"
