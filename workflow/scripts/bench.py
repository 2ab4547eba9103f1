"""Rule bench: the sampler benchmark (unie.pipeline.bench), one process, every core of the job held."""

from pathlib import Path

from unie.pipeline.rule import job, write_json

with job(snakemake) as log:
    from unie.pipeline.bench import bench_markdown, run_bench
    from unie.pipeline.tables_figures import read_results

    p = snakemake.params
    i = snakemake.input
    inputs = {
        "tokenizer": i.tokenizer,
        "train": i.train,
        **{role: str(Path(getattr(i, role)[0]).parent) for role in ("dlm", "proxy", "ar")},
    }
    result = run_bench(
        p.bench,
        inputs,
        read_results(i.genppl),
        seq_len=p.seq_len,
        threads=snakemake.threads,
        evaluator=p.evaluator,
        device=p.device,
        log=log,
        token_cache=p.token_cache,
    )
    text = bench_markdown(result)
    tmp = Path(snakemake.output.md + ".tmp")
    tmp.write_text(text)
    tmp.replace(snakemake.output.md)
    write_json(result, snakemake.output.json, records=[snakemake.output.md])  # last: it vouches for the Markdown
    log(text)
