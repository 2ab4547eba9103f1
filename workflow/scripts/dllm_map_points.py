"""Rules dllm_map_points_{backbone}: a backbone's lm-eval points with its trees, the map's points.json
(unie.pipeline.map_runs.merge_map)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.map_runs import merge_map

    merge_map(snakemake.input.lmeval, list(snakemake.input.trees), snakemake.output[0])
