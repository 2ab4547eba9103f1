# The sampler benchmark (`snakemake --cores 1 bench`): not part of `all`.  One process measures, side by side,
# Algorithm 2's window step and whole run against plain MDLM and their analytic limits, Uni-E vs the AR at
# equal Gen PPL (Figure 3's runs), and the backbone's training throughput; the job holds every core.


def bench_inputs(wc):
    b, runs = config["bench"], FACTS.fig3_runs["tradeoff"]
    fig = config["figures"]["fig3_tradeoff"]
    return {
        "tokenizer": run_path("resources/tokenizer"),
        "train": run_path(f"resources/tokenized/{TRAIN_DOMAIN}/train.parquet"),
        "dlm": model_files(b["dlm"]),
        "proxy": model_files(b["proxy"]),
        "ar": model_files(b["ar"]),
        "genppl": genppl_targets([runs[fig["label"]], fig["baselines"]["AR"]]),
    }


rule bench:
    input:
        unpack(bench_inputs),
    output:
        json=report(run_path("results/bench/sampler.json"), **REPORT["bench"], labels={"file": "JSON"}),
        md=report(run_path("results/bench/sampler.md"), **REPORT["bench"], labels={"file": "Markdown"}),
    log:
        run_path("logs/bench/sampler.log"),
    threads: held_cores()
    resources:
        **rule_resources("bench", 8000, 60, gpu=True, precision=False),
    params:
        bench=lambda wc: dict(
            config["bench"],
            uni_run=FACTS.fig3_runs["tradeoff"][config["figures"]["fig3_tradeoff"]["label"]],
            ar_run=config["figures"]["fig3_tradeoff"]["baselines"]["AR"],
        ),
        evaluator=lambda wc: config["figures"]["fig3_tradeoff"]["evaluator"],
        seq_len=config["data"]["seq_len"],
        device=config["device"],
        token_cache=TOKEN_CACHE,
    script:
        "../scripts/bench.py"


rule bench_paper_scale:
    # the paper-scale bench (not part of `all`): GPT-2-small sizes with random weights (no download), on the
    # profile's device, in fp32 / TF32 / bf16 autocast; `snakemake --cores 1 bench_paper_scale --config device=cuda`
    output:
        json=report(
            run_path("results/bench/paper_scale/paper_scale.json"),
            **REPORT["bench_paper_scale"],
            labels={"file": "JSON"},
        ),
        md=report(
            run_path("results/bench/paper_scale/paper_scale.md"),
            **REPORT["bench_paper_scale"],
            labels={"file": "Markdown"},
        ),
    log:
        run_path("logs/bench/paper_scale.log"),
    threads: held_cores()
    resources:
        **rule_resources("bench", 8000, 60, gpu=True, precision=False),
    params:
        device=config["device"],
        precisions=" ".join(config["bench"].get("paper_scale", {}).get("precisions", ["fp32", "tf32", "bf16"])),
        steps=" ".join(map(str, config["bench"].get("paper_scale", {}).get("steps", [128, 256]))),
        repeats=config["bench"].get("paper_scale", {}).get("repeats", 1),
        skip=" ".join(config["bench"].get("paper_scale", {}).get("skip", [])),
    shell:
        "python -m unie.pipeline.bench --paper-scale --device {params.device} --precisions {params.precisions} "
        "--steps {params.steps} --repeats {params.repeats} --skip {params.skip} --out $(dirname {output.json}) "
        "> {log} 2>&1"
