"""Rule replicate_runs: each seed's whole run (unie.pipeline.replicate_runs.run_replicates), then its manifest."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.replicate_runs import run_replicates, write_manifest

    commands = {int(s): cmd for s, cmd in snakemake.params.commands.items()}
    run_dirs = run_replicates(commands, snakemake.params.side_by_side, snakemake.log[0])
    for (seed, cmd), path in zip(commands.items(), snakemake.output):
        write_manifest(seed, run_dirs[seed], cmd, path)
