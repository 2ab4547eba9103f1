"""Rules dllm_eval (one Table 3 row) and dllm_eval_{model} (every row of one backbone, `dllm.eval_job: model`):
per row one lm-eval run over the seven tasks (lm-eval writes the JSONs), then the row's effect against its
backbone.  More than one GPU (resources.gpu > 1 on CUDA): data parallel, one rank per GPU under torchrun."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    import os
    import shutil

    from unie.dllm.rows import row_model_args
    from unie.dllm.lmeval import run_evaluation
    from unie.pipeline.launch import processes
    from unie.pipeline.tables_figures import dllm_effect
    from unie.config.settings import LmEvalSettings, job_gpus

    d = snakemake.params.dllm
    lm = LmEvalSettings.from_dllm(d)
    nproc = processes(job_gpus(snakemake.resources), snakemake.params.device)
    out = snakemake.output
    many = not isinstance(out.results, str)  # a model's job: one output of each kind per row, in the rows' order

    for i, (name, row) in enumerate(snakemake.params.rows.items()):
        inputs = snakemake.params.inputs[name]
        results, effect = (out.results[i], out.effect[i]) if many else (out.results, out.effect)
        out_dir = os.path.dirname(results)
        args = row_model_args(name, row, d, inputs, snakemake.params.device, job_precision(snakemake))
        log(f"{name}: model_args: {args}")
        local = inputs.get("tasks") or inputs.get("local_tasks")  # toy tasks, or the paper's local ones
        include = os.path.dirname(local[0]) if local else None
        kwargs = dict(
            model_args=args,
            tasks=d["tasks"]["names"],
            include_path=include,
            output_path=out_dir,
            batch_size=lm.batch_size,
            include_defaults=lm.include_default_tasks,
            limit=lm.limit,
            seed=lm.seed,
            allow_code_execution=lm.allow_code_execution,
        )
        found = run_evaluation(kwargs, nproc, log=log, threads=snakemake.threads)
        shutil.copyfile(found, results)  # lm-eval's JSON, byte for byte, at a deterministic path
        base = row.get("delta_to")
        e = dllm_effect(name, base, d["tasks"], out_dir, os.path.dirname(inputs["base"]) if base else None, effect)
        if e["avg"]:
            log(
                f"{name} against {base}: average {e['avg']['delta']:+.2f} ± {e['avg']['se']:.2f} points, "
                f"{100 * e['avg']['changed']:.1f} % of completions changed"
            )
        if e["window"]:
            log(
                f"{name} window: {100 * e['window']['disagree']:.1f} % of {e['window']['window_rows']} "
                f"row-iterations disagree, {100 * e['window']['steered']:.1f} % steered"
            )
