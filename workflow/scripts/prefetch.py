"""Rule prefetch: everything `all` downloads (the inputs: the download rules' files and the lm-eval task record)
opened offline in a fresh process, the report written, and one console line per checkpoint to place by hand."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import sys
    from pathlib import Path

    from unie.pipeline.prefetch import Plan, by_hand_lines, check_offline, report

    files = {k: [v] if isinstance(v, str) else list(v) for k, v in snakemake.input.items()}
    tasks = []
    if files.get("lmeval_tasks"):
        import json

        tasks = sorted(json.loads(Path(files["lmeval_tasks"][0]).read_text()))
    p = Plan(by_hand=tuple(snakemake.params.by_hand), lmeval_tasks=tuple(tasks))
    checked = check_offline(p, files=files)
    for c in checked:
        log(f"offline: {c['kind']} {c['path']}: {c['ok']}")
    lines = by_hand_lines(p)
    for line in lines:
        log(line)
        print(line, file=sys.__stderr__)  # the console: what the operator must still do
    Path(snakemake.output[0]).write_text(report(p, checked, hf_home=checked[0]["hf_home"] if checked else None))
    log(f"{len(checked)} items load offline; {len(lines)} to place by hand")
