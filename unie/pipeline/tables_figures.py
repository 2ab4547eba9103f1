"""Rules ``table1``, ``table2``, ``fig2``, ``partition_check``, the DLLM half's tables and figures, the paper page
and ``docs`` (the results page): read the result JSONs, call :mod:`unie.report` and write the LaTeX / CSV / PDF /
PNG / Markdown targets (atomically, directories created)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.integrity import read_json


def read_results(paths) -> list[dict]:
    return [read_json(p) for p in paths]


def _write_text(text: str, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_table(tex: str, df, tex_path, csv_path) -> None:
    _write_text(df.to_csv(index=False), csv_path)
    _write_text(tex, tex_path)


def write_figure(figure, df, pdf_path, png_path, csv_path=None) -> None:
    """The figure as PDF and PNG, and its plotted points ``df`` as CSV (when ``csv_path`` is given)."""
    import matplotlib.pyplot as plt

    Path(pdf_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(pdf_path)
    figure.savefig(png_path, dpi=150)
    plt.close(figure)
    if csv_path is not None:
        _write_text(df.to_csv(index=False), csv_path)


def table1(rows: dict, domains: list[str], ppl_paths, tex_path, csv_path) -> str:
    from ..report.tables import table1 as build

    tex, df = build(rows, domains, read_results(ppl_paths))
    write_table(tex, df, tex_path, csv_path)
    return tex


def table2(
    rows: dict,
    runs: dict,
    evaluators: dict,
    genppl_paths,
    tex_path,
    csv_path,
    train_domain: str,
    seq_len: int,
    log=print,
) -> str:
    """Table 2; with an ``exact`` evaluator, pi's entropy rate (once per table) gives the excess-NLL column."""
    from ..report.tables import table2 as build

    h = None
    if any(ev["kind"] == "exact" for ev in evaluators.values()):
        from ..data.toy_world import HMM

        h, h_se = HMM(train_domain).entropy_rate(seq_len, n=8192, seed=0)
        log(f"entropy rate of pi ({train_domain}, L={seq_len}): {h:.4f} ± {h_se:.4f} nats/token (8192 samples)")
    tex, df = build(rows, runs, evaluators, read_results(genppl_paths), entropy_rate=h)
    write_table(tex, df, tex_path, csv_path)
    return tex


def fig2(fig: dict, genppl_paths, pdf_path, png_path, csv_path):
    from ..report.figures import fig2_ablation

    figure, df = fig2_ablation(fig, read_results(genppl_paths))
    write_figure(figure, df, pdf_path, png_path, csv_path)
    return df


# the contexts whose closed-form log F is computable (teacher_forced needs log p_AR(xs), which it cannot give)
PARTITION_CONTEXTS = ("teacher_forced_carry_over", "masked", "exact")


def partition_check(tex_path, csv_path):
    """The brute-force partition check (V=3, L=4) for the AR contexts with a closed-form log F."""
    import pandas as pd

    from ..energy.partition import check_partition
    from ..report.tables import partition_table

    df = pd.DataFrame([r for ctx in PARTITION_CONTEXTS for r in check_partition(ctx)])
    tex, summary = partition_table(df)
    write_table(tex, df, tex_path, csv_path)
    return summary


def read_effects(effect_paths) -> dict:
    """``row -> effect.json`` (:func:`dllm_effect`) from ``results/dllm/rows/{row}/effect.json`` paths."""
    return {Path(p).parent.name: read_json(p) for p in effect_paths}


def table3(rows: dict, tasks: dict, result_paths, tex_path, csv_path, effect_paths=(), room_paths=()) -> str:
    """Table 3 from the ``results/dllm/rows/{row}/results.json`` files (lm-eval's own JSON).  ``tasks``: config
    ``dllm.tasks`` (toy tasks: metric and column from :mod:`unie.data.tasks`; built-in tasks: ``metrics`` and
    ``columns`` from the config); each decoder row's per-task paired s.e. from its ``effect.json``; each backbone's
    room from its ``results/dllm/room/{backbone}.json``."""
    from ..report.tables import table3 as build

    results = {}
    for p in result_paths:
        name = Path(p).parent.name
        results[name] = read_lmeval_results(p)
    missing = sorted(set(rows) - set(results))
    if missing:
        raise FileNotFoundError(f"Table 3 rows without an lm-eval result: {missing}")
    names, metrics, columns = task_metrics(tasks)
    tex, df = build(
        rows, names, results, metrics, columns, read_effects(effect_paths), read_rooms(room_paths), averaged(tasks)
    )
    write_table(tex, df, tex_path, csv_path)
    return tex


def read_rooms(paths) -> dict:
    """backbone -> its room record (rules ``dllm_room_{backbone}``), each checked as it is read."""
    return {Path(p).stem: read_json(p, "room record") for p in (paths or [])}


def selection_table(rows: dict, tasks: dict, result_paths, effect_paths, tex_path, csv_path, room_paths=()) -> str:
    """The appendix's selection-rule table (:func:`unie.report.tables.selection_table`) from the rows' lm-eval
    results, ``effect.json`` files and the backbones' room records."""
    from ..report.tables import selection_table as build

    results = {Path(p).parent.name: read_lmeval_results(p) for p in result_paths}
    names, metrics, _ = task_metrics(tasks)
    tex, df = build(rows, results, read_effects(effect_paths), metrics, averaged(tasks), read_rooms(room_paths))
    write_table(tex, df, tex_path, csv_path)
    return tex


def sample_records(row_dir, tasks: list[str], metrics: dict) -> dict:
    """``task -> {(subtask, doc_id): record}`` of the ``--log_samples`` files of the newest lm-eval run under
    ``row_dir`` (``samples_{subtask}_{date}.jsonl`` beside ``results_{date}.json``; a group such as ``mmlu`` is read
    through its leaf subtasks in ``group_subtasks``), each file checked against what the run recorded: the records of
    the metric's filter, each as lm-eval wrote it (``doc``, ``arguments``, ``filtered_resps``, the metric).  A task
    whose samples are missing is left out."""
    found = sorted(Path(row_dir).rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {}
    check_recorded(found[-1])
    stamp = found[-1].stem[len("results_") :]
    groups = json.loads(found[-1].read_text()).get("group_subtasks", {})

    def leaves(task):
        return [leaf for sub in groups[task] for leaf in leaves(sub)] if groups.get(task) else [task]

    out = {}
    for task in tasks:
        metric, filt = metrics[task].split(",", 1)
        records = {}
        for leaf in leaves(task):
            path = found[-1].parent / f"samples_{leaf}_{stamp}.jsonl"
            if not path.exists():
                records = {}
                break
            check_recorded(path)
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("filter", "none") == filt and metric in rec:
                    records[(leaf, int(rec["doc_id"]))] = rec
        if records:
            out[task] = records
    return out


def item_records(row_dir, tasks: list[str], metrics: dict) -> dict:
    """``task -> {(subtask, doc_id): (score, completion)}`` (:func:`sample_records`; the completion is the filtered
    response as text).  A task whose samples are missing is left out (its delta then has no paired standard
    error)."""
    return {
        task: {
            key: (float(rec[metrics[task].split(",", 1)[0]]), json.dumps(rec.get("filtered_resps")))
            for key, rec in records.items()
        }
        for task, records in sample_records(row_dir, tasks, metrics).items()
    }


def task_metrics(tasks: dict) -> tuple[list[str], dict, dict]:
    """``(names, metrics, columns)`` of config ``dllm.tasks`` (toy tasks: metric and column from
    :mod:`unie.data.tasks`; built-in tasks: ``metrics`` and ``columns`` from the config)."""
    from ..data.tasks import PAPER_COLUMNS, PRIMARY_METRIC

    names = list(tasks["names"])
    metrics = tasks.get("metrics") or {t: f"{PRIMARY_METRIC[t]},none" for t in names}
    columns = tasks.get("columns") or {t: PAPER_COLUMNS[t] for t in names}
    return names, metrics, columns


def averaged(tasks: dict) -> list[str]:
    """The tasks of Table 3's Avg. and of every averaged change (config ``dllm.tasks.average``; default: all)."""
    return list(tasks.get("average") or tasks["names"])


def dllm_effect(row: str, base: str | None, tasks: dict, row_dir, base_dir, out_path) -> dict:
    """``results/dllm/rows/{row}/effect.json``: what a decoder row changed against its backbone (``base``, its
    ``delta_to``; None for a row without one) on the same items: the paired change per task and of the average ±
    s.e., the share of completions changed (:func:`unie.eval.metrics.paired_effect`) and, for Algorithm 3, the
    window's disagreement and steering shares from the row's ``throughput.json``
    (:func:`unie.eval.metrics.window_shares`).  The sampler and its resolved options are the ones lm-eval's
    results record (``config.unie_decoder``)."""
    from ..eval.metrics import paired_effect, window_shares
    from .rule import write_json

    names, metrics, _ = task_metrics(tasks)
    decoder = read_json(Path(row_dir, "results.json"), hashed=False)["config"].get("unie_decoder") or {}
    options = decoder.get("options") if isinstance(decoder.get("options"), dict) else {}
    effect = (
        paired_effect(
            item_records(row_dir, names, metrics), item_records(base_dir, names, metrics), names, averaged(tasks)
        )
        if base
        else {"tasks": {}, "avg": None}
    )
    record = {
        "row": row,
        "backbone": base,
        "sampler": decoder.get("sampler"),
        "energy": options.get("energy"),
        "selection": options.get("selection"),
        "options": options,
        **effect,
        "window": window_shares(read_json(Path(row_dir, "throughput.json"), hashed=False)),
    }
    write_json(record, out_path, records=row_files(row_dir))  # it vouches for the row's lm-eval files
    return record


def row_files(row_dir) -> list[str]:
    """A Table 3 row's lm-eval files (``results.json``, ``throughput.json``, lm-eval's ``results_*.json`` and
    ``samples_*.jsonl``), whose sizes and hashes its ``effect.json`` records."""
    found = [
        Path(row_dir, "results.json"),
        Path(row_dir, "throughput.json"),
        *sorted(Path(row_dir).rglob("results_*.json")),
        *sorted(Path(row_dir).rglob("samples_*.jsonl")),
    ]
    return [str(p) for p in found if p.exists()]


def check_recorded(path) -> None:
    """Check an lm-eval file of a row against its record in the row's ``effect.json`` (:func:`row_files`), when the
    row has one (a backbone row read for a decoder row's paired effect)."""
    from ..core.integrity import fix_by_rerun, records_of, verify_file

    for holder in (Path(path).parent / "effect.json", Path(path).parent.parent / "effect.json"):
        if holder.exists():
            record = records_of(holder).get(os.path.normpath(path))
            if record is not None:
                verify_file(path, record, fix_by_rerun())
            return


def read_lmeval_results(path) -> dict:
    """A row's ``results.json`` (lm-eval's own JSON), checked before its values are used: against the size and hash
    its row's ``effect.json`` records, or, without that record, for numbers that agree
    (:func:`unie.eval.metrics.lmeval_numbers_problem`)."""
    from ..core.integrity import DamagedFileError, fix_by_rerun, parse_json, records_of, verify_file
    from ..eval.metrics import lmeval_numbers_problem

    path = Path(path)
    effect = path.parent / "effect.json"
    record = records_of(effect).get(os.path.normpath(path)) if effect.exists() else None
    if record is not None:
        verify_file(path, record, fix_by_rerun())
        return parse_json(path)
    results = parse_json(path)
    problem = lmeval_numbers_problem(results) if isinstance(results, dict) else None
    if problem:
        raise DamagedFileError(path, f"its numbers disagree: {problem}", fix_by_rerun())
    return results


def fig3(fig: dict, genppl_paths, timing_paths, pdf_path, png_path, csv_path, summary_path):
    """Figure 3 and its summary JSON (the paper's three claims, measured)."""
    from ..report.figures import fig3_tradeoff
    from .rule import write_json

    figure, df, summary = fig3_tradeoff(fig, read_results(genppl_paths), read_results(timing_paths))
    write_figure(figure, df, pdf_path, png_path, csv_path)
    write_json(summary, summary_path)
    return df, summary


def fig4(sweep_dir, pdf_path, png_path, csv_path, log=print) -> str:
    """Figure 4 from ``results/dllm/sweeps/fig4/points.json``; logs and returns a one-line summary per curve, and
    logs a warning naming the points whose throughput is flagged (drawn hollow)."""
    from ..report.figures import fig4_tradeoff

    sweep = read_json(Path(sweep_dir, "points.json"))
    figure, df = fig4_tradeoff(sweep)
    write_figure(figure, df, pdf_path, png_path, csv_path)
    summary = "\n".join(
        f"{r.curve} {r.key}={r.value}: {r.accuracy:.1f} ± {r.stderr:.1f} %, {r.tokens_per_s:.0f} tok/s"
        for r in df.itertuples()
    )
    log(summary)
    bad = [p["point"] for p in sweep["points"] if not p.get("trusted", True)]
    if bad:
        log(f"WARNING: throughput of {len(bad)} points flagged (hollow markers; machine busy?): {', '.join(bad)}")
    return summary


def sweep_table(sweep_dir, caption: str, tex_path, csv_path) -> str:
    """An appendix k/w table from ``results/dllm/sweeps/{sweep}/points.json``."""
    from ..report.tables import sweep_table as build

    sweep = read_json(Path(sweep_dir, "points.json"))
    tex, df = build(sweep, caption)
    write_table(tex, df, tex_path, csv_path)
    return tex


def map_table(points_paths, tex_path, csv_path) -> str:
    """The proxy-strength map's table from the ``points.json`` of rules ``dllm_map_{job}``."""
    from ..report.tables import map_table as build

    jobs = read_results(points_paths)
    tex, df = build(jobs)
    write_table(tex, df, tex_path, csv_path)
    return f"{len(df)} map points"


def map_figure(points_paths, pdf_path, png_path, csv_path) -> str:
    """The proxy-strength map's figure from the ``points.json`` of rules ``dllm_map_{job}``."""
    from ..report.figures import map_figure as build

    figure, df = build(read_results(points_paths))
    write_figure(figure, df, pdf_path, png_path, csv_path)
    return f"{len(df)} map points"


def rst_html(text: str) -> str:
    """A report caption (``workflow/report/*.rst``, reStructuredText) as an HTML fragment (docutils, which Snakemake
    brings; without it, the text escaped)."""
    import html

    try:
        from docutils.core import publish_parts
    except ImportError:
        return f"<p>{html.escape(text)}</p>"
    return publish_parts(text, writer_name="html", settings_overrides={"report_level": 5})["body"]


def paper_page(items: list[dict], captions: dict, note: str, out_path) -> int:
    """Rule ``paper_page``: every table and figure of the run on one HTML page (``runs/<name>/results/report/paper.html``),
    in the paper's order, each under its heading with its caption visible (each file checked against its record
    first: :func:`unie.core.integrity.read_page_bytes`); tables converted from their ``.tex``
    (:func:`unie.report.html.tex_to_html`: the same cells, bold and caption), figures embedded from their PNG.

    ``items``: ``{target, heading, files}`` in page order; ``captions``: target -> its report caption
    (reStructuredText).  Returns the number of sections."""
    import re

    from ..core.integrity import read_page_bytes, read_page_text
    from ..report.html import figure_html, page, tex_to_html

    sections = []
    for item in items:
        about = f'<div class="caption-from-report">{rst_html(captions.get(item["target"], ""))}</div>'
        body = []
        for f in item["files"]:
            path = Path(f)
            if path.suffix == ".tex":  # each table and figure checked against its record as it is read
                body.append(tex_to_html(read_page_text(path)))
            elif path.suffix == ".png":
                figcaption = about if len(item["files"]) == 1 else f"<p>{path.stem.replace('_', ' ')}</p>"
                body.append(figure_html(read_page_bytes(path), figcaption, f"{item['heading']}: {path.stem}"))
        figures_only = all(Path(f).suffix == ".png" for f in item["files"])
        intro = "" if figures_only and len(item["files"]) == 1 else about
        sections.append((re.sub(r"\W+", "-", item["target"]), item["heading"], intro + "".join(body)))
    sections.append(
        (
            "timeline",
            "Where the run's time went",
            "<p>Written when the run ends (the Snakefile's <code>onsuccess</code>), from its jobs' own "
            "records: one lane per concurrently running job, the critical path in red, the idle core-time "
            "in the title (<code>benchmarks/timeline.tsv</code>, <code>timeline.json</code>).</p>"
            '<img src="../../benchmarks/timeline.png" alt="the run\'s jobs on a timeline (written when the '
            'run ends)" style="max-width:100%">',
        )
    )
    intro = (
        f"<p>{note} Every table and figure this run made, in the paper's order; each caption says what the "
        "numbers are. The LaTeX, CSV, PDF and PNG files are under the run's <code>results/</code>; "
        "its <code>results/tables/paper_vs_ours.md</code> puts the paper's numbers beside these.</p>"
    )
    _write_text(page("Uni-E: the paper's tables and figures, regenerated", intro, sections), out_path)
    return len(sections)


def read_table_csv(path):
    """A table's CSV as a DataFrame, checked against its record as it is read
    (:func:`unie.core.integrity.read_page_text`)."""
    import io

    import pandas as pd

    from ..core.integrity import read_page_text

    return pd.read_csv(io.StringIO(read_page_text(path)))


def read_pages(paths) -> dict:
    """stem -> DataFrame (CSV), parsed JSON (``name.json``) or text (``name.md``), each checked before it is read:
    a JSON against its content hash, a table against its record."""
    from ..core.integrity import read_page_text

    out = {}
    for path in map(Path, paths):
        if path.suffix == ".csv":
            out[path.stem] = read_table_csv(path)
        elif path.suffix == ".json":
            out[path.name] = read_json(path)
        elif path.suffix == ".md":
            out[path.name] = read_page_text(path)
    return out


def results_page(tables, timing, out_path, note: str = "") -> Path:
    """Rule docs: every regenerated table of ``tables`` (CSV, Markdown, figure JSON; :func:`read_pages`) and the
    timing JSONs of ``timing`` as one Markdown page (:func:`unie.report.markdown.page_from_results`), written
    atomically; returns its path."""
    from ..core.integrity import atomic_write_text
    from ..report.markdown import page_from_results

    timing = [read_json(p) for p in timing]
    return atomic_write_text(out_path, page_from_results(read_pages(tables), timing, note))


def results_dir_pages(results_dir) -> tuple[list[Path], list[Path]]:
    """``(tables, timing)`` of a run's results directory for :func:`results_page` by hand: its tables (CSV,
    Markdown), its figures' CSVs and JSONs but the case studies', and its timing JSONs."""
    results = Path(results_dir)
    files = sorted(
        [
            *results.glob("tables/*.csv"),
            *results.glob("tables/*.md"),
            *results.glob("figures/*.csv"),
            *results.glob("figures/*.json"),
        ]
    )
    return [f for f in files if f.name != "case_studies.json"], sorted(results.glob("timing/*.json"))


def made_on(note: str) -> str:
    """``note`` and the machine a results page was made on (CPU model and instruction set, torch version), with what
    that means for a rerun's numbers."""
    import torch

    from .timing_runs import cpu_isa, cpu_name

    return (
        f"{note} Made on: {cpu_name()} ({cpu_isa()}), torch {torch.__version__}. "
        "A rerun reproduces these numbers bit for bit only on the same CPU model and library versions; on "
        "another CPU the trained models round differently and cells move within their sampling error."
    )


def write_timeline(run_dir, since: float, cores: int, log=None) -> dict | None:
    """Where a run's time went (:mod:`unie.pipeline.job_records`): the jobs of ``run_dir`` that started after ``since``
    as ``benchmarks/timeline.{tsv,json,png}``; None when none ran."""
    import sys
    import time

    from ..report.timeline import summary, timeline_figure
    from .job_records import read_jobs

    jobs = read_jobs(run_dir, since)
    if not jobs:
        return None
    info = summary(jobs, cores)
    t0 = min(j["start"] for j in jobs)
    critical = set(info["critical_path"])
    lines = ["rule\tstart_s\tend_s\tseconds\tthreads\tcritical\toutputs"]
    for j in jobs:
        lines.append(
            f"{j['rule']}\t{j['start'] - t0:.1f}\t{j['end'] - t0:.1f}\t{j['end'] - j['start']:.1f}\t"
            f"{j['threads']}\t{int(j['id'] in critical)}\t{','.join(j['outputs'][:3])}"
        )
    out = Path(run_dir) / "benchmarks"
    _write_text("\n".join(lines) + "\n", out / "timeline.tsv")
    rules = {j["id"]: j["rule"] for j in jobs}
    record = {
        **info,
        "critical_path": [rules[i] for i in info["critical_path"]],
        "since": since,
        "written": time.time(),
    }
    _write_text(json.dumps(record, indent=1) + "\n", out / "timeline.json")
    write_figure(
        timeline_figure(jobs, info, f"{run_dir}: where the time went"), None, out / "timeline.pdf", out / "timeline.png"
    )
    (log or (lambda m: print(m, file=sys.stderr)))(
        f"unie: timeline {out / 'timeline.png'}: {len(jobs)} jobs in {info['wall_s'] / 60:.1f} min, idle "
        f"{100 * (info['idle_share'] or 0):.0f} % of {cores} cores, critical path {info['critical_s'] / 60:.1f} min "
        f"({' -> '.join(record['critical_path'][-4:])})"
    )
    return record
