"""Rules timing / timing_fig3: the wall-clock of one sampling run's generation (``timing``) or of each run Figure 3
times (``timing_fig3``, one after the other) per step count (warm-up excluded, one batch, median of repeats), with
every core of the job held; each point checked (spread, CPU / wall, seconds per call; config
figures.fig3_tradeoff.timing.checks, else TimingChecks' defaults), flagged points rerun, then marked."""

from unie.pipeline.rule import job, job_precision, write_json

with job(snakemake) as log:
    from unie.eval.timing import TimingChecks
    from unie.pipeline.sample import SampleJob
    from unie.pipeline.timing_runs import time_run

    p = snakemake.params
    batch_size = p.timing["batch_size"]
    for (run, r), out in zip(p.runs.items(), snakemake.output):  # the outputs are in the runs' order
        sampling = SampleJob.from_spec(
            run,
            r["spec"],
            inputs=r["inputs"],
            seq_len=p.seq_len,
            n_samples=batch_size,  # one batch is timed
            batch_size=batch_size,
            domain=p.train_domain,
            seed=p.seed,
            device=p.device,
            precision=job_precision(snakemake),
        )
        result = time_run(
            sampling,
            steps=list(r["steps"]),
            warmup=p.timing["warmup"],
            repeats=p.timing["repeats"],
            threads=snakemake.threads,
            log=log,
            checks=TimingChecks(**p.timing.get("checks", {})),
        )
        write_json(result, out)
