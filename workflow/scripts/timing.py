"""Rule timing: the wall-clock of one sampling run's generation per step count (warm-up excluded, one batch,
median of repeats), with every core of the job held."""

from unie.pipeline.rule import job, write_json

with job(snakemake) as log:
    from unie.pipeline.timing import time_run

    p = snakemake.params
    result = time_run(
        run=snakemake.wildcards.run,
        spec=p.spec,
        steps=list(p.steps),
        inputs={k: v for k, v in snakemake.input.items()},
        seq_len=p.seq_len,
        batch_size=p.timing["batch_size"],
        warmup=p.timing["warmup"],
        repeats=p.timing["repeats"],
        threads=snakemake.threads,
        domain=p.train_domain,
        seed=p.seed,
        device=p.device,
        log=log,
    )
    write_json(result, snakemake.output[0])
