"""Rule cases: the paper's four appendix case figures from toy-world samples, picked by exact pi."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: the backend is chosen here, not in the library (notebooks plot inline)

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.case_studies import run_cases

    p, i = snakemake.params, snakemake.input
    run_cases(
        dict(p.cfg),
        {"tokenizer": i.tokenizer, "dlm": str(Path(i.dlm[0]).parent), "proxy": str(Path(i.proxy[0]).parent)},
        dict(snakemake.output.items()),
        seq_len=p.seq_len,
        domain=p.train_domain,
        source=p.source,
        device=p.device,
        log=log,
    )
