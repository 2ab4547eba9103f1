"""Rule ppl_energy: Table 1 perplexity of an energy-corrected model (EDLM / Uni-EDLM rows)."""

import json
from pathlib import Path

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.eval.likelihood import energy_ppl

    p = snakemake.params
    dirs = {role: str(Path(snakemake.input[role][0]).parent) for role in ("dlm", "proxy") if role in snakemake.input.keys()}
    result = energy_ppl(p.spec, dirs, snakemake.input.tokenizer, dict(zip(p.domains, snakemake.input.data)),
                        n_mc=p.ppl["n_mc"], batch_size=p.ppl["batch_size"], max_sequences=p.ppl.get("max_sequences"),
                        seed=p.seed, device=p.device, log=log)
    with open(snakemake.output[0], "w") as f:
        json.dump(result, f, indent=2)
