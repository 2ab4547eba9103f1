"""Each job's own record, from which every run's timeline is made (:func:`unie.pipeline.tables_figures.write_timeline`).

* :func:`record_job`: a job (``unie.pipeline.rule.job``) appends one JSON line to its run's ``benchmarks/jobs.jsonl``
  when it ends: its rule, start, end, threads, CPU seconds, largest resident memory, whether it ran in the warm
  server, inputs and outputs (one ``write`` of one line to a file opened for appending: lines of jobs that end
  together do not interleave).  It replaces Snakemake's ``benchmark:`` files, which measure the process Snakemake
  started: for a job the warm server runs (:mod:`unie.pipeline.warm`), that process only waits;
* :func:`~unie.pipeline.tables_figures.write_timeline`: at the end of a run (the Snakefile's ``onsuccess``), the jobs that ran in this invocation
  (started after it began) become ``benchmarks/timeline.tsv`` (one line per job: rule, start and end in seconds
  from the run's first job, wall-clock, threads, on the critical path), ``benchmarks/timeline.json`` (the summary:
  wall-clock, idle core-seconds and their share, the critical path: :func:`unie.report.timeline.summary`) and
  ``benchmarks/timeline.png`` (:func:`unie.report.timeline.timeline_figure`), which the run's report page shows.
  A run on a cluster gets the same (its jobs write to the shared run directory).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..config.priorities import measured_seconds, parse_records, read_table, table_path

JOBS_FILE = "benchmarks/jobs.jsonl"


def process_started() -> float:
    """When this process started (seconds since the epoch): a job's start includes its Python, torch and model
    imports, which take seconds a job.  Linux's ``/proc``; elsewhere now.  A job run by the warm server
    (:mod:`unie.pipeline.warm`): its client process's start."""
    from .warm import child_start

    started = child_start()
    if started is not None:
        return started
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime, in clock ticks since boot
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + start / ticks
    except (OSError, ValueError, StopIteration):
        return time.time()


def run_dir_of(path: str) -> str | None:
    """The run directory a job's log or output lies in (``runs/<name>``), or None."""
    parts = Path(path).parts
    if "runs" in parts:
        i = parts.index("runs")
        if i + 1 < len(parts):
            return str(Path(*parts[: i + 2]))
    return None


def _paths(obj) -> list[str]:
    """Every path in ``obj`` (:func:`job_files`' walk, repeats kept)."""
    if obj is None:
        return []
    if isinstance(obj, (str, os.PathLike)):
        return [str(obj)]
    if isinstance(obj, dict) or hasattr(obj, "__dict__") and not isinstance(obj, (list, tuple)):
        values = obj.values() if isinstance(obj, dict) else vars(obj).values()
        return [p for v in values for p in _paths(v)]
    return [p for v in obj for p in _paths(v)]


def job_files(obj) -> list[str]:
    """The file paths of a job's ``input``/``output``/``log`` (a Snakemake Namedlist, a list, a dict or a namespace
    of them, nested lists flattened), each once, in order."""
    return list(dict.fromkeys(_paths(obj)))


def job_name(snakemake) -> tuple[str, dict[str, str]]:
    """A job's rule and its wildcards as ``{name: value}``, from Snakemake's object or a test's stand-in (a named
    list, a dict, a namespace; anything missing reads as empty)."""
    rule = getattr(snakemake, "rule", None) or "job"
    try:
        wc = getattr(snakemake, "wildcards", None) or {}
        items = wc.items() if hasattr(wc, "items") else vars(wc).items()
        return str(rule), {str(k): str(v) for k, v in items}
    except (AttributeError, KeyError, TypeError):
        return str(rule), {}


def process_usage() -> dict:
    """What this job's process used so far: ``cpu_s``, its CPU seconds (user + system, with those of the processes it
    started and waited for), ``max_rss_mb``, the largest resident memory of it or of one of those processes, and
    ``warm``, whether it runs in a fork of the run's warm server (:mod:`unie.pipeline.warm`: its imports done before
    it started, not counted)."""
    import resource

    from .warm import child_start

    t = os.times()
    rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {
        "cpu_s": round(t.user + t.system + t.children_user + t.children_system, 2),
        "max_rss_mb": round(rss / 1024, 1),  # Linux: kilobytes
        "warm": child_start() is not None,
    }


def record_job(snakemake, start: float, end: float, ok: bool) -> None:
    """Append this job's record to its run's :data:`JOBS_FILE` (module doc); nothing for a job outside a run, and
    never an error (a timeline is a record, never a reason for a job to fail)."""
    try:
        outputs = job_files(getattr(snakemake, "output", None))
        run = next((r for r in map(run_dir_of, job_files(getattr(snakemake, "log", None)) + outputs) if r), None)
        if run is None:
            return
        rule, wildcards = job_name(snakemake)
        rec = {
            "rule": rule,
            "start": start,
            "end": end,
            "ok": ok,
            "threads": int(getattr(snakemake, "threads", 1) or 1),
            "pid": os.getpid(),
            **process_usage(),
            "wildcards": wildcards,
            "inputs": job_files(getattr(snakemake, "input", None)),
            "outputs": outputs,
        }
        path = Path(run) / JOBS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(rec) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001
        pass


def read_jobs(run_dir, since: float = 0.0) -> list[dict]:
    """The successful job records of ``run_dir`` that started at or after ``since`` (the latest record of a job that
    ran twice), each with an ``id``."""
    path = Path(run_dir) / JOBS_FILE
    if not path.exists():
        return []
    latest = {}
    for rec in parse_records(path.read_text()):
        if rec["start"] >= since:
            key = tuple(rec["outputs"]) or (rec["rule"], rec["pid"])
            latest[key] = rec
    jobs = sorted(latest.values(), key=lambda r: r["start"])
    for i, j in enumerate(jobs):
        j["id"] = f"{i}:{j['rule']}"
    return jobs


def expected_seconds(run_dir, profile: str | None) -> tuple[dict[str, float], str]:
    """Each job's expected seconds (:mod:`unie.config.priorities`) and where they came from: ``run_dir``'s own
    records over the profile's reference table."""
    path = Path(run_dir) / JOBS_FILE
    own = measured_seconds(parse_records(path.read_text())) if path.exists() else {}
    table = read_table(table_path(profile)) if profile else {}
    sources = [s for s, d in ((str(path), own), (str(table_path(profile)) if profile else "", table)) if d]
    return {**table, **own}, " over ".join(sources) or "nothing measured"


__all__ = [
    "JOBS_FILE",
    "job_files",
    "job_name",
    "process_started",
    "expected_seconds",
    "read_jobs",
    "record_job",
    "run_dir_of",
]
