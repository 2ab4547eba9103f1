"""Rule sample: ``n_samples`` sequences from one sampling run at one step count, then their generative
perplexity under every evaluator (each loaded once) and their entropy in bits."""

from pathlib import Path

from unie.pipeline.rule import job, write_json

with job(snakemake) as log:
    from unie.pipeline.sample import evaluate_samples, run_sampler

    p = snakemake.params
    run_sampler(
        run=snakemake.wildcards.run,
        spec=p.spec,
        steps=int(snakemake.wildcards.steps),
        inputs={k: v for k, v in snakemake.input.items()},
        out_path=snakemake.output.samples,
        n_samples=p.n_samples,
        batch_size=p.batch_size,
        seq_len=p.seq_len,
        seed=p.seed,
        device=p.device,
        domain=p.train_domain,
        log=log,
    )
    paths = {}
    for name in p.evaluators:
        files = snakemake.input.get(f"ev_{name}")
        if files:
            paths[name] = str(Path(files[0]).parent) if isinstance(files, list) else files
    result = evaluate_samples(
        samples_path=snakemake.output.samples,
        tokenizer_dir=snakemake.input.tokenizer,
        evaluators=p.evaluators,
        eos_rule=p.eos_rule,
        evaluator_paths=paths,
        domain=p.train_domain,
        device=p.device,
        log=log,
    )
    write_json(result, snakemake.output.genppl)
