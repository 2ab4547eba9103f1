"""Rule dllm_eval: one Table 3 row = one lm-eval run over the seven tasks (lm-eval writes the JSONs).
More than one GPU (resources.gpu > 1 on CUDA): data parallel, one rank per GPU under torchrun."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os
    import shutil

    from unie.dllm.rows import row_model_args
    from unie.lmeval import run_evaluation
    from unie.pipeline.launch import processes
    from unie.pipeline.report import dllm_effect
    from unie.pipeline.settings import LmEvalSettings

    d = snakemake.params.dllm
    out_dir = os.path.dirname(snakemake.output.results)
    args = row_model_args(snakemake.wildcards.row, snakemake.params.row, d, dict(snakemake.input.items()),
                          snakemake.params.device)
    log(f"model_args: {args}")
    local = snakemake.input.get("tasks") or snakemake.input.get("local_tasks")  # toy tasks, or the paper's local ones
    include = os.path.dirname(local[0]) if local else None
    lm = LmEvalSettings.from_dllm(d)
    kwargs = dict(model_args=args, tasks=d["tasks"]["names"], include_path=include, output_path=out_dir,
                  batch_size=lm.batch_size, include_defaults=lm.include_default_tasks, limit=lm.limit, seed=lm.seed,
                  allow_code_execution=lm.allow_code_execution)
    nproc = processes(snakemake.resources.get("gpu", 0), snakemake.params.device)
    found = run_evaluation(kwargs, nproc, log=log, threads=snakemake.threads)
    shutil.copyfile(found, snakemake.output.results)  # lm-eval's JSON, byte for byte, at a deterministic path
    base = snakemake.params.row.get("delta_to")
    e = dllm_effect(snakemake.wildcards.row, base, d["tasks"], out_dir,
                    os.path.dirname(snakemake.input.base) if base else None, snakemake.output.effect)
    if e["avg"]:
        log(f"against {base}: average {e['avg']['delta']:+.2f} ± {e['avg']['se']:.2f} points, "
            f"{100 * e['avg']['changed']:.1f} % of completions changed")
    if e["window"]:
        log(f"window: {100 * e['window']['disagree']:.1f} % of {e['window']['window_rows']} row-iterations disagree, "
            f"{100 * e['window']['steered']:.1f} % steered")
