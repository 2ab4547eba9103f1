"""Rule genppl: generative perplexity of one sample file under every evaluator, and entropy (bits)."""

import json
from pathlib import Path

from unie.workflow import job

with job(snakemake) as log:
    from unie.jobs import evaluate_samples

    p = snakemake.params
    paths = {}
    for name in p.evaluators:
        files = snakemake.input.get(f"ev_{name}")
        if files:
            paths[name] = str(Path(files[0]).parent) if isinstance(files, list) else files
    result = evaluate_samples(
        samples_path=snakemake.input.samples,
        tokenizer_dir=snakemake.input.tokenizer,
        evaluators=p.evaluators,
        eos_rule=p.eos_rule,
        evaluator_paths=paths,
        domain=p.train_domain,
        device=p.device,
        log=log,
    )
    with open(snakemake.output[0], "w") as f:
        json.dump(result, f, indent=2)
