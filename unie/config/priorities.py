"""Job priorities that follow the DAG: the longest remaining chain first.

A job's priority is its **remaining chain**: its own expected seconds plus the longest remaining chain of the jobs
that read its outputs (:func:`remaining_chains`, a longest path to the DAG's end by dynamic programming over the
consumers).  Among the jobs whose inputs exist, Snakemake starts those with the highest priority first (both of its
schedulers maximise the priority of what they start), so the head of the critical path starts as soon as it can and
short side jobs fill the cores around it.  The Snakefile sets it on every rule (:func:`unie.pipeline.run.chain_priorities`,
over the DAG Snakemake built); a rule's own ``priority:`` stays its fallback when nothing was measured.

**Expected seconds** (:func:`own_seconds`) come from measured job records (each job's line in its run's
``benchmarks/jobs.jsonl``, :mod:`unie.pipeline.job_records`), keyed by rule and wildcards (:func:`job_key`):

* the run directory's own records when it has them (a previous run of the same directory: this machine's seconds);
* else the profile's reference table shipped in the repository, :data:`TABLE_DIR` ``/<profile>.tsv``, written from a
  measured run by ``python -m unie.config.priorities runs/<run>/benchmarks/jobs.jsonl`` (:func:`main`);
* a job with no record of its own takes the median of its rule's jobs, else the median of every job measured, so a
  job of a new rule still counts as one job on its chain.

A key's seconds are the longest of its last :data:`KEEP` records: a training resumed from its last checkpoint (a
few seconds) does not hide its full length.  Seconds from two sources (this machine, the table's) may differ in
scale; a priority only orders jobs, and a wrong order costs idle time, never a wrong result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from .profile import REPO

TABLE_DIR = REPO / "config" / "job_seconds"  # <profile>.tsv: the reference seconds of each job of a profile's run
KEEP = 3  # a key's seconds: the longest of its last KEEP records


def job_key(rule: str, wildcards: dict | None = None) -> str:
    """``rule`` or ``rule[k=v,...]`` (wildcards sorted by name): a job's name in the records and the table, the same
    in every run directory."""
    items = sorted((str(k), str(v)) for k, v in dict(wildcards or {}).items())
    return rule + (f"[{','.join(f'{k}={v}' for k, v in items)}]" if items else "")


def rule_of(key: str) -> str:
    return key.split("[", 1)[0]


def parse_records(text: str) -> list[dict]:
    """The successful job records of a ``jobs.jsonl`` (one JSON object a line, file order); a line that does not
    parse (a job killed while writing) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("ok") and "start" in rec and "end" in rec:
            out.append(rec)
    return out


def measured_seconds(records: list[dict], keep: int = KEEP) -> dict[str, float]:
    """``job key -> seconds``: the longest of each key's last ``keep`` records (in the order they were written;
    a record from before records had wildcards is left out)."""
    runs = defaultdict(list)
    for rec in records:
        if "wildcards" not in rec:
            continue
        runs[job_key(rec["rule"], rec.get("wildcards"))].append(max(0.0, float(rec["end"]) - float(rec["start"])))
    return {key: max(seconds[-keep:]) for key, seconds in runs.items()}


def own_seconds(key: str, seconds: dict[str, float]) -> float | None:
    """The expected seconds of job ``key``: its own, else the median of its rule's jobs, else the median of every
    job in ``seconds``; None when nothing was measured."""
    if key in seconds:
        return seconds[key]
    same_rule = [s for k, s in seconds.items() if rule_of(k) == rule_of(key)]
    if same_rule:
        return statistics.median(same_rule)
    return statistics.median(seconds.values()) if seconds else None


def remaining_chains(own: dict, consumers: dict) -> dict:
    """``job -> its remaining chain``: ``own[job]`` plus the longest remaining chain among ``consumers[job]`` (the
    jobs that read its outputs; those not in ``own`` are left out).  The graph has no cycle (a DAG)."""
    chain: dict = {}
    for start in own:
        if start in chain:
            continue
        stack = [(start, False)]
        while stack:  # depth first without recursion: a DAG of thousands of jobs (the paper profile's samples)
            job, expanded = stack.pop()
            if job in chain:
                continue
            after = [c for c in consumers.get(job, ()) if c in own and c != job]
            if expanded:
                chain[job] = own[job] + max((chain[c] for c in after), default=0.0)
                continue
            stack.append((job, True))
            stack.extend((c, False) for c in after if c not in chain)
    return chain


def table_path(profile: str) -> Path:
    return TABLE_DIR / f"{profile}.tsv"


def read_table(path) -> dict[str, float]:
    """A reference table (``job key<TAB>seconds`` a line, ``#`` comments): ``{key: seconds}``; ``{}`` when there is
    none."""
    path = Path(path)
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.rsplit("\t", 1)
            out[key] = float(value)
    return out


def format_table(seconds: dict[str, float], source: str) -> str:
    """The reference table of ``seconds`` (:func:`measured_seconds`), jobs by name, with the command that wrote it."""
    head = [
        f"# Expected seconds of each job (unie.config.priorities): measured in {source},",
        "# written by python -m unie.config.priorities; rewrite it from a new measured run of the profile.",
        "# job\tseconds",
    ]
    return "\n".join(head + [f"{k}\t{seconds[k]:.1f}" for k in sorted(seconds)]) + "\n"


def main(argv=None) -> int:
    """``python -m unie.config.priorities runs/toy/benchmarks/jobs.jsonl [--profile toy]``: the reference table of
    the profile whose run wrote the records (the run directory's name up to its first ``+``)."""
    ap = argparse.ArgumentParser(
        prog="python -m unie.config.priorities",
        description="write a profile's reference table of job seconds from a measured run",
    )
    ap.add_argument("jobs", help="a run's benchmarks/jobs.jsonl")
    ap.add_argument("--profile", help="the profile (default: the run directory's name up to its first '+')")
    ap.add_argument("--out", help=f"where to write (default: {TABLE_DIR.relative_to(REPO)}/<profile>.tsv)")
    args = ap.parse_args(argv)
    jobs = Path(args.jobs)
    if not jobs.is_file():
        print(f"unie: {jobs}: no such file", file=sys.stderr)
        return 1
    profile = args.profile or jobs.resolve().parent.parent.name.split("+", 1)[0]
    seconds = measured_seconds(parse_records(jobs.read_text()))
    if not seconds:
        print(f"unie: {jobs}: no successful job records", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else table_path(profile)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_table(seconds, f"{jobs.parent.parent.name}/ ({len(seconds)} jobs)"))
    print(f"unie: {out}: {len(seconds)} jobs of profile {profile}")
    return 0


__all__ = [
    "KEEP",
    "TABLE_DIR",
    "format_table",
    "job_key",
    "main",
    "measured_seconds",
    "own_seconds",
    "parse_records",
    "read_table",
    "remaining_chains",
    "rule_of",
    "table_path",
]


if __name__ == "__main__":
    raise SystemExit(main())
