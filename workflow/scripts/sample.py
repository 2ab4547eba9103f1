"""Rules sample / sample_run: ``n_samples`` sequences from one sampling run at one step count (``sample``) or at
every step count of the run (``sample_run``, models and evaluators loaded once), then their generative perplexity
under every evaluator and their entropy in bits."""

from pathlib import Path

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.core.precision import for_device
    from unie.pipeline.sample import SampleJob, sample_and_score

    p = snakemake.params
    paths = {}
    for name in p.evaluators:
        files = snakemake.input.get(f"ev_{name}")
        if files:
            paths[name] = str(Path(files[0]).parent) if isinstance(files, list) else files
    samples, genppl = snakemake.output.samples, snakemake.output.genppl
    sampling = SampleJob.from_spec(
        snakemake.wildcards.run,
        p.spec,
        inputs={k: v for k, v in snakemake.input.items()},
        seq_len=p.seq_len,
        n_samples=p.n_samples,
        batch_size=p.batch_size,
        domain=p.train_domain,
        seed=p.seed,
        device=p.device,
        precision=for_device(p.get("precision", "fp32"), p.device),
    )
    sample_and_score(
        sampling,
        steps=list(p.steps),
        sample_paths=[samples] if isinstance(samples, str) else list(samples),
        genppl_paths=[genppl] if isinstance(genppl, str) else list(genppl),
        evaluators=p.evaluators,
        eos_rule=p.eos_rule,
        evaluator_paths=paths,
        log=log,
    )
