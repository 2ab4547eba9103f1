"""Rule import_released: a released checkpoint (a model's `source`) converted once into our checkpoint format
(results/models/{model}/config.json with `arch: dit` + model.safetensors), on the CPU."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.model_files import import_released

    import_released(
        snakemake.wildcards.model,
        snakemake.params.source,
        snakemake.params.method,
        snakemake.params.options,
        snakemake.input.tokenizer,
        snakemake.output.weights.rsplit("/", 1)[0],
        snakemake.params.path,
        log=log,
    )
