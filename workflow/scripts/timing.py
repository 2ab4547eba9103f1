"""Rule timing: the wall-clock of one sampling run's generation per step count (warm-up excluded, one batch,
median of repeats), with every core of the job held; each point checked (spread, CPU / wall, seconds per call;
config figures.fig3_tradeoff.timing.checks, else TimingChecks' defaults), flagged points rerun, then marked."""

from unie.pipeline.rule import job, write_json

with job(snakemake) as log:
    from unie.core.precision import for_device
    from unie.eval.timing import TimingChecks
    from unie.pipeline.sample import SampleJob
    from unie.pipeline.timing import time_run

    p = snakemake.params
    batch_size = p.timing["batch_size"]
    sampling = SampleJob.from_spec(
        snakemake.wildcards.run,
        p.spec,
        inputs={k: v for k, v in snakemake.input.items()},
        seq_len=p.seq_len,
        n_samples=batch_size,  # one batch is timed
        batch_size=batch_size,
        domain=p.train_domain,
        seed=p.seed,
        device=p.device,
        precision=for_device(p.get("precision", "fp32"), p.device),
    )
    result = time_run(
        sampling,
        steps=list(p.steps),
        warmup=p.timing["warmup"],
        repeats=p.timing["repeats"],
        threads=snakemake.threads,
        log=log,
        checks=TimingChecks(**p.timing.get("checks", {})),
    )
    write_json(result, snakemake.output[0])
