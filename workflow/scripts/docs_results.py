"""Rule docs: every regenerated table as Markdown (the run's ``results/docs/results.md``, copied to
``docs/results.md`` when a run's numbers are published).  By hand, on any run's results directory:

    python workflow/scripts/docs_results.py runs/toy/results docs/results.md
"""

import sys
from pathlib import Path


def load(paths) -> dict:
    """stem -> DataFrame (CSV), parsed JSON (``stem.json``) or text (``stem.md``), each checked before it is read:
    a JSON against its content hash, a table against its record."""
    from unie.core.integrity import read_json, read_page_text
    from unie.pipeline.paper_vs_ours import read_table_csv

    out = {}
    for path in map(Path, paths):
        if path.suffix == ".csv":
            out[path.stem] = read_table_csv(path)
        elif path.suffix == ".json":
            out[path.name] = read_json(path)
        elif path.suffix == ".md":
            out[path.name] = read_page_text(path)
    return out


def write_page(tables, timing, out, note=""):
    from unie.core.integrity import atomic_write_text
    from unie.report.markdown import page_from_results

    from unie.core.integrity import read_json

    timing = [read_json(p) for p in timing]
    return atomic_write_text(out, page_from_results(load(tables), timing, note))


if "snakemake" in globals():
    from unie.pipeline.rule import job

    with job(snakemake) as log:  # noqa: F821
        i = snakemake.input  # noqa: F821
        import torch

        from unie.pipeline.timing_runs import cpu_isa, cpu_name

        note = (
            f"{snakemake.params.note} Made on: {cpu_name()} ({cpu_isa()}), torch {torch.__version__}. "  # noqa: F821
            "A rerun reproduces these numbers bit for bit only on the same CPU model and library versions; on "
            "another CPU the trained models round differently and cells move within their sampling error."
        )
        log(f"wrote {write_page(i.tables, i.timing, snakemake.output.md, note)}")  # noqa: F821
else:
    results, out = Path(sys.argv[1]), Path(sys.argv[2])
    files = sorted(
        [
            *results.glob("tables/*.csv"),
            *results.glob("tables/*.md"),
            *results.glob("figures/*.csv"),
            *results.glob("figures/*.json"),
        ]
    )
    files = [f for f in files if f.name != "case_studies.json"]
    print(write_page(files, sorted(results.glob("timing/*.json")), out))
