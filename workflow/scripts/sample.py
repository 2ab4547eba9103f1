"""Rules sample / sample_run / sample_{table}: ``n_samples`` sequences from one sampling run at one step count
(``sample``), at every step count of the run (``sample_run``, models and evaluators loaded once) or of every run of
a table or figure (``sample_table2``, ``sample_fig2``, ``sample_fig3``: one run after the other), then their
generative perplexity under every evaluator and their entropy in bits."""

from pathlib import Path

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.sample import SampleJob, sample_and_score

    p = snakemake.params
    paths = {}
    for name in p.evaluators:
        files = snakemake.input.get(f"ev_{name}")
        if files:
            paths[name] = str(Path(files[0]).parent) if isinstance(files, list) else files
    samples, genppl = snakemake.output.samples, snakemake.output.genppl
    samples = [samples] if isinstance(samples, str) else list(samples)
    genppl = [genppl] if isinstance(genppl, str) else list(genppl)
    if getattr(p, "runs", None):  # a table's runs, each with its step counts' outputs in order
        runs = {name: (r["spec"], r["n_samples"], r["inputs"], r["steps"]) for name, r in p.runs.items()}
    else:
        runs = {snakemake.wildcards.run: (p.spec, p.n_samples, {k: v for k, v in snakemake.input.items()}, p.steps)}
    i = 0  # the run's first output
    for run, (spec, n_samples, inputs, steps) in runs.items():
        n = len(steps)
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
            steps=list(steps),
            sample_paths=samples[i:i + n],
            genppl_paths=genppl[i:i + n],
            evaluators=p.evaluators,
            eos_rule=p.eos_rule,
            evaluator_paths=paths,
            log=log,
        )
        i += n
