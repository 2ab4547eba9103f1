"""Rule dllm_oracle: the eps-smoothed oracle proxy of the toy tasks' test items (unie.dllm.oracle), for the map."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import json
    import os

    from unie.dllm.oracle import write_oracle

    tasks_dir = os.path.dirname(snakemake.input.yamls[0])
    docs = []
    for task in snakemake.params.tasks:
        with open(os.path.join(tasks_dir, "data", f"{task}_test.jsonl")) as f:
            docs += [json.loads(line) for line in f if line.strip()]
    tok = os.path.join(os.path.dirname(snakemake.input.meta), "tokenizers", "word")
    out = write_oracle(docs, tok, os.path.dirname(snakemake.output[0]), eps=snakemake.params.eps)
    log(f"oracle of {len(docs)} test items ({', '.join(snakemake.params.tasks)}), eps {snakemake.params.eps}: {out}")
