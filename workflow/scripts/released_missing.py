"""Rule released_missing: a released checkpoint that is placed by hand (published on Google Drive only) is absent.
Fails with one line naming the file and where to put it (unie.pipeline.model_files.released_missing)."""

from unie.pipeline.rule import job

with job(snakemake):
    from unie.pipeline.model_files import released_missing

    released_missing(snakemake.params.kind, snakemake.params.path)
