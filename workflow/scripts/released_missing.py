"""Rule released_missing: a released checkpoint that is placed by hand (published on Google Drive only) is absent.
Fails with one line naming the file and where to put it."""

from unie.pipeline.rule import job

with job(snakemake):
    from unie.models.released import SOURCES

    kind, path = snakemake.params.kind, snakemake.params.path
    raise FileNotFoundError(
        f"{path} is missing: the released {kind} checkpoint ({SOURCES[kind].identifier}) cannot be downloaded by the "
        f"workflow; download it by hand and place it at {path} (docs/released-checkpoints.md), then rerun"
    )
