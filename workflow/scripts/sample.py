"""Rule sample: ``n_samples`` sequences from one sampling run at one step count."""

from unie.workflow import job

with job(snakemake) as log:
    from unie.jobs import run_sampler

    p = snakemake.params
    run_sampler(
        run=snakemake.wildcards.run,
        spec=p.spec,
        steps=int(snakemake.wildcards.steps),
        inputs={k: v for k, v in snakemake.input.items()},
        out_path=snakemake.output[0],
        n_samples=p.n_samples,
        batch_size=p.batch_size,
        seq_len=p.seq_len,
        seed=p.seed,
        device=p.device,
        log=log,
    )
