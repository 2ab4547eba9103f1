"""Rule dllm_oracle: the eps-smoothed oracle proxy of the toy tasks' test items (unie.dllm.oracle), for the map
(unie.pipeline.map_runs.write_map_oracle)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.pipeline.map_runs import write_map_oracle

    write_map_oracle(
        snakemake.params.tasks,
        os.path.dirname(snakemake.input.yamls[0]),
        os.path.dirname(snakemake.input.meta),
        os.path.dirname(snakemake.output[0]),
        snakemake.params.eps,
        log=log,
    )
