"""Rule table_app_map: the proxy-strength map as a table (beyond the paper)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import map_table

    log(map_table(list(snakemake.input), snakemake.output.tex, snakemake.output.csv))
