"""Rule fig_app_map: the proxy-strength map as a figure (beyond the paper)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import map_figure

    o = snakemake.output
    log(map_figure(list(snakemake.input), o.pdf, o.png, o.csv))
