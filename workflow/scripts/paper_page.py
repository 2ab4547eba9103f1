"""Rule paper_page: every table and figure of the run on one HTML page (results/report/paper.html), also the
landing page of `snakemake --report report.html`."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import paper_page

    p = snakemake.params
    n = paper_page(p.sections, p.captions, p.note, snakemake.output.html)
    log(f"{snakemake.output.html}: {n} sections")
