"""Rule docs: every regenerated table as Markdown (the run's ``results/docs/results.md``, copied to
``docs/results.md`` when a run's numbers are published; unie.pipeline.tables_figures.results_page).  By hand, on
any run's results directory:

    python workflow/scripts/docs_results.py runs/toy/results docs/results.md
"""

import sys
from pathlib import Path

if "snakemake" in globals():
    from unie.pipeline.rule import job

    with job(snakemake) as log:  # noqa: F821
        from unie.pipeline.tables_figures import made_on, results_page

        i = snakemake.input  # noqa: F821
        note = made_on(snakemake.params.note)  # noqa: F821
        log(f"wrote {results_page(i.tables, i.timing, snakemake.output.md, note)}")  # noqa: F821
else:
    from unie.pipeline.tables_figures import results_dir_pages, results_page

    tables, timing = results_dir_pages(Path(sys.argv[1]))
    print(results_page(tables, timing, Path(sys.argv[2])))
