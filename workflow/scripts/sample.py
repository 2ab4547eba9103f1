"""Rules sample / sample_run / sample_{table}: ``n_samples`` sequences from one sampling run at one step count
(``sample``), at every step count of the run (``sample_run``, models and evaluators loaded once) or of every run of
a table or figure that its outputs name (``sample_table2``, ``sample_fig2``, ``sample_fig3``: one run after the
other), then their generative perplexity under every evaluator and their entropy in bits.  Under
``sampling.job: table`` every job gets its table's runs (``params.runs``) and samples those its outputs name; each
run's folder is then marked as sampled here (unie.config.sampling_jobs)."""

from pathlib import Path

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.sample import SampleJob, mark_sampled, sample_and_score

    p = snakemake.params
    paths = {}
    for name in p.evaluators:
        files = snakemake.input.get(f"ev_{name}")
        if files:
            paths[name] = str(Path(files[0]).parent) if isinstance(files, list) else files
    samples, genppl = snakemake.output.samples, snakemake.output.genppl
    samples = [samples] if isinstance(samples, str) else list(samples)
    genppl = [genppl] if isinstance(genppl, str) else list(genppl)
    # the outputs, in pairs, name the (run, step count) to make: .../samples/{run}/steps{n}.parquet
    todo = {}
    for sample_path, genppl_path in zip(samples, genppl):
        todo.setdefault(Path(sample_path).parent.name, []).append(
            (int(Path(sample_path).stem[len("steps") :]), sample_path, genppl_path)
        )
    for run, made in todo.items():
        if getattr(p, "runs", None):  # a table's runs (sampling.job: table), each with its settings and files
            r = p.runs[run]
            spec, n_samples, inputs = r["spec"], r["n_samples"], r["inputs"]
        else:
            spec, n_samples, inputs = p.spec, p.n_samples, {k: v for k, v in snakemake.input.items()}
        sampling = SampleJob.from_spec(
            run,
            spec,
            inputs=inputs,
            seq_len=p.seq_len,
            n_samples=n_samples,
            batch_size=p.batch_size,
            domain=p.train_domain,
            seed=p.seed,
            device=p.device,
            precision=job_precision(snakemake),
        )
        sample_and_score(
            sampling,
            steps=[n for n, _, _ in made],
            sample_paths=[s for _, s, _ in made],
            genppl_paths=[g for _, _, g in made],
            evaluators=p.evaluators,
            eos_rule=p.eos_rule,
            evaluator_paths=paths,
            log=log,
        )
        mark_sampled(made[0][1])
