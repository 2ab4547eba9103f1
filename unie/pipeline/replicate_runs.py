"""The ``replicates`` target's jobs: each seed's whole run (rule ``replicate_runs``), then the aggregate page (rule
``replicates``); the plan (commands, directories) is :mod:`unie.config.replicate_plan`, the arithmetic
:mod:`unie.report.replicate_tables`.

* :func:`run_replicates`: each seed's ``snakemake`` run as its own process, one after another (a local run: each
  holds every core) or side by side (a cluster executor: each submits its own jobs), every line of their output on
  the console behind ``[seed S]`` and in the job's log; then, per seed, a manifest: the run's directory and the
  size and SHA-256 of every table and figure CSV it has (``records``), so the aggregate reads what the run wrote.
* :func:`aggregate_replicates`: the CSVs named by the manifests, verified, aggregated per table (mean, sd, min,
  max, each training's value), the claims over trainings, Figure 4 with the spread, one Markdown page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from ..config.replicate_plan import shown
from ..core.errors import InputError
from ..core.integrity import file_record, read_json, records_of, verify_file
from .rule import write_json

RUN_LINE = re.compile(r"^unie: run directory (\S+?)/?$")  # what the Snakefile prints first (its RUN_DIR)


class ReplicateError(InputError, RuntimeError):
    """A seed's run failed (its own error is above it on the console and in the log)."""


def _pump(proc, seed: int, log_file, found: dict) -> None:
    for line in proc.stdout:
        line = line.rstrip("\n")
        m = RUN_LINE.match(line)
        if m:
            found[seed] = m.group(1)
        text = f"[seed {seed}] {line}"
        print(text, file=sys.__stderr__, flush=True)
        log_file.write(text + "\n")
        log_file.flush()


def run_replicates(commands: dict[int, list[str]], side_by_side: bool, log_path, workdir=".") -> dict[int, str]:
    """Run each seed's command (``seed -> argv``); returns ``seed -> its run directory`` (as the run printed it).
    One after another unless ``side_by_side``.  A failed run is a :class:`ReplicateError` naming its seed and command,
    after the others (side by side) have finished."""
    found: dict[int, str] = {}
    failed = []
    with open(log_path, "a", buffering=1) as log_file:

        def start(seed, cmd):
            log_file.write(f"[seed {seed}] $ {shown(cmd)}\n")
            print(f"unie: replicates: seed {seed}: {shown(cmd)}", file=sys.__stderr__, flush=True)
            proc = subprocess.Popen(
                cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
            t = threading.Thread(target=_pump, args=(proc, seed, log_file, found), daemon=True)
            t.start()
            return proc, t

        running = []
        for seed, cmd in commands.items():
            proc, t = start(seed, cmd)
            if side_by_side:
                running.append((seed, cmd, proc, t))
                continue
            if proc.wait() != 0:
                t.join()
                failed.append((seed, cmd))
                break  # one at a time: stop at the first failure
            t.join()
        for seed, cmd, proc, t in running:
            if proc.wait() != 0:
                failed.append((seed, cmd))
            t.join()
    if failed:
        seed, cmd = failed[0]
        raise ReplicateError(
            f"the run of seed {seed} failed (its error is above, behind [seed {seed}]); rerun "
            f"it alone to see it: {shown(cmd)}"
        )
    missing = [s for s in commands if s not in found]
    if missing:
        raise ReplicateError(f"the run of seed {missing[0]} did not name its run directory")
    return found


def table_files(run_dir) -> list[Path]:
    """The CSVs of a run's tables and figures (what the aggregate reads)."""
    base = Path(run_dir) / "results"
    return sorted([*base.glob("tables/*.csv"), *base.glob("figures/*.csv")])


def write_manifest(seed: int, run_dir: str, command: list[str], path) -> None:
    """What one seed's run made, for the aggregate: its directory, its command, and the size and SHA-256 of every
    table and figure CSV (``records``, checked when the aggregate reads them)."""
    files = table_files(run_dir)
    if not files:
        raise ReplicateError(f"{run_dir}: the run of seed {seed} wrote no table or figure CSV")
    records = {str(f): file_record(f) for f in files}
    write_json(
        {"seed": seed, "run_dir": run_dir, "command": shown(command), "tables": {f.stem: str(f) for f in files}},
        path,
        records=records,
    )


def aggregate_replicates(manifest_paths: list, out_dir, log=print) -> dict:
    """The aggregate of the runs the manifests name (module doc), under ``out_dir``: ``tables/<table>.csv`` (every
    cell, each training's value, mean, sd, min, max), ``claims.csv``, ``break_even.csv`` when the runs have the map,
    ``fig4_spread.{png,pdf}`` when they have Figure 4, and ``replicates.md``.  Returns ``{table: rows}``."""
    import pandas as pd

    from ..report import replicate_tables as agg
    from ..report.markdown import md_table, num, plain
    from .tables_figures import _write_text, write_figure

    manifests = [read_json(p, "replicate manifest") for p in manifest_paths]
    vouched = {m["seed"]: records_of(p) for m, p in zip(manifests, manifest_paths)}
    runs = {m["seed"]: m["run_dir"] for m in manifests}
    names = sorted(set.intersection(*(set(m["tables"]) for m in manifests)))
    frames: dict[str, dict[int, pd.DataFrame]] = {}
    for name in names:
        frames[name] = {}
        for m in manifests:
            path = m["tables"][name]
            record = vouched[m["seed"]].get(os.path.normpath(path))
            if record is None:
                raise ReplicateError(f"{manifest_paths[0]}: {path} is not among the files the manifest vouches for")
            verify_file(path, record, f"rerun `snakemake replicates`: it brings the run of seed {m['seed']} up to date")
            frames[name][m["seed"]] = pd.read_csv(path)
    out = Path(out_dir)
    aggregates, counts = {}, {}
    for name, by_seed in frames.items():
        a = agg.aggregate(name, by_seed)
        aggregates[name] = a
        counts[name] = len(a)
        _write_text(a.to_csv(index=False), out / "tables" / f"{name}.csv")
    claim_table = agg.claims(frames)
    _write_text(claim_table.to_csv(index=False), out / "claims.csv")
    notes = []
    if "table3_dllm" in frames:
        line = agg.ratio_line(frames["table3_dllm"], "proxy", {"llada": "LLaDA-like", "dream": "Dream-like"})
        if line:
            notes += [line, ""]
    if "fig4_dllm_tradeoff" in frames:
        from ..report.figures import fig4_spread

        write_figure(fig4_spread(frames["fig4_dllm_tradeoff"]), None, out / "fig4_spread.pdf", out / "fig4_spread.png")
        notes += ["Figure 4 over the trainings: `fig4_spread.png`.", ""]
    if "table_app_map" in frames:  # the map's break-even judgements over the trainings
        be = agg.break_even_claims(frames["table_app_map"])
        if not be.empty:
            _write_text(be.to_csv(index=False), out / "break_even.csv")
            notes += [
                "## The map's break-even judgements over the trainings",
                "",
                "The pairwise AUC at which each rule's paired change crosses zero along the continuum from the learned "
                "proxy to the oracle (bootstrap s.e.); `never`: no crossing, with the change and the AUC at the learned "
                "end … at the oracle; (backbone x): the backbone's own AUC on the same candidates (`break_even.csv`).",
                "",
                agg.break_even_view(be),
                "",
            ]
        check = agg.judgement_check(frames["table_app_map"])
        if not check.empty:
            _write_text(check.to_csv(index=False), out / "judgement_check.csv")
            notes += [
                "Does a map cell's sign follow its judgement? Of the cells of the rules that read a proxy, those "
                "beyond 2 s.e., and how many have the sign of their rule's judgement minus the backbone's own "
                "(`auc - dlm_auc`; `judgement_check.csv`):",
                "",
                md_table(
                    ["seed", "backbone", "cells", "beyond 2 s.e.", "sign as judged", "against", "largest gap against"],
                    [
                        [r.seed, plain(r.backbone), r.cells, r.beyond, r.agree, r.against, num(r.worst_gap, 3)]
                        for r in check.itertuples()
                    ],
                ),
                "",
            ]
    _write_text(agg.page(runs, aggregates, claim_table, notes), out / "replicates.md")
    log(
        f"replicates: {len(frames)} tables over seeds {', '.join(map(str, runs))}; {len(claim_table)} claims "
        f"checked; {out / 'replicates.md'}"
    )
    return counts


__all__ = ["ReplicateError", "aggregate_replicates", "run_replicates", "table_files", "write_manifest"]
