"""Rules timing / timing_fig3: the wall-clock of one sampling run's generation (``timing``) or of each run Figure 3
times (``timing_fig3``, one after the other) per step count (warm-up excluded, one batch, median of repeats), with
every core of the job held; each point checked (spread, CPU / wall, seconds per call; config
figures.fig3_tradeoff.timing.checks, else TimingChecks' defaults), flagged points rerun, then marked
(unie.pipeline.timing_runs.time_runs)."""

from unie.pipeline.rule import job, job_precision

with job(snakemake) as log:
    from unie.pipeline.timing_runs import time_runs

    p = snakemake.params
    time_runs(
        p.runs,
        list(snakemake.output),  # in the runs' order
        p.timing,
        seq_len=p.seq_len,
        domain=p.train_domain,
        seed=p.seed,
        device=p.device,
        threads=snakemake.threads,
        log=log,
        precision=job_precision(snakemake),
    )
