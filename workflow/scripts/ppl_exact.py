"""Rule ppl_exact: the exact perplexity of the true distribution pi on each domain's evaluation split."""

import json

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.eval.likelihood import exact_ppl

    p = snakemake.params
    result = exact_ppl(dict(zip(p.domains, snakemake.input.data)), snakemake.input.tokenizer,
                       max_sequences=p.ppl.get("max_sequences"), log=log)
    with open(snakemake.output[0], "w") as f:
        json.dump(result, f, indent=2)
