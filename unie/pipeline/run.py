"""What the Snakefile adds around a run of the workflow (in the process that plans the jobs, never inside a job).

* :func:`remake_before_planning`: before Snakemake builds its DAG, :func:`unie.pipeline.damage.plan_rebuilds` sets
  damaged files aside and returns what the run must remake; those files are added to the run's forced files
  (Snakemake's ``--forcerun``, whose files are also targets), so that they and what is made from them are made again
  in this run whatever the target, and a dry run plans exactly these jobs.  Snakemake reads its DAG settings when it
  starts executing (``Workflow.execute``), after the Snakefile is read: the check wraps that method of this run's
  workflow object, since nothing in the Snakefile runs between the two.  A damaged file that cannot be set aside (a
  read-only folder) ends the run with one line.  ``snakemake --report`` (``Workflow.create_report``) first checks
  the run's files the same way, renaming nothing: a damaged table or figure is named in one line and no report is
  made from it.
* :func:`quiet_scheduler`: a local run keeps no job rate limit at Snakemake's default, whose timers wake Snakemake's
  scheduling loop more often with every job that finishes (called by :func:`remake_before_planning`'s wrapper).
* :func:`chain_priorities`: every rule's priority becomes the remaining chain of its job (its expected seconds and
  the longest chain of the jobs that read its outputs, :mod:`unie.config.priorities`), so the critical path starts
  first.
* :class:`StopReport`: after a SIGTERM (Snakemake's graceful stop: no new job, the running ones finish), the run
  ends with one line saying what happened (``unie: stopped by SIGTERM: ... none failed ...; rerun the same command
  to continue``) and exit status 1, instead of Snakemake's ``At least one job did not complete successfully``.
"""

from __future__ import annotations

import signal
import sys

from .damage import SetAsideError, plan_rebuilds
from ..config.priorities import job_key, own_seconds, remaining_chains


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def producer_of(workflow):
    """``path -> rule name`` (or None) over the workflow's rules."""

    def producer(path: str) -> str | None:
        for rule in workflow.rules:
            try:
                if rule.is_producer(path):
                    return rule.name
            except Exception:  # a rule whose outputs cannot be matched (e.g. functions): not this one
                continue
        return None

    return producer


def remake_before_planning(workflow, run_dir: str = ".", log=_say) -> None:
    """Wrap ``workflow.execute`` so that, just before the jobs are planned, damaged files of the run in
    ``run_dir`` (its directory, ``runs/<name>``) are set aside and what must be remade is forced (module doc).  A
    ``--touch`` run is left alone."""
    execute = workflow.execute

    def execute_after_checks(*args, **kwargs):
        plugin = kwargs.get("executor_plugin", args[0] if args else None)  # what the run executes with
        common = getattr(plugin, "common_settings", None)
        dry_run = bool(
            getattr(plugin, "name", None) == "dryrun"
            or getattr(common, "dryrun_exec", False)
            or getattr(workflow.output_settings, "dryrun", False)
        )
        if getattr(plugin, "name", None) != "touch":
            try:
                remake = plan_rebuilds(".", producer_of(workflow), log=log, dry_run=dry_run, run=run_dir)
            except SetAsideError as e:
                log(f"unie: {e}")
                raise SystemExit(1) from None
            if remake:
                settings = workflow.dag_settings
                settings.forcerun = frozenset(settings.forcerun) | frozenset(remake)
        quiet_scheduler(workflow, plugin)
        return execute(*args, **kwargs)

    create_report = getattr(workflow, "create_report", None)

    def report_after_checks(*args, **kwargs):
        said = []
        remake = plan_rebuilds(".", producer_of(workflow), log=said.append, dry_run=True, run=run_dir)
        for line in said:
            log(line)
        if remake:
            log(
                f"unie: no report is made from damaged, deleted or replaced files ({len(remake)} to remake): run "
                "snakemake first (it remakes them), then --report"
            )
            raise SystemExit(1)
        return create_report(*args, **kwargs)

    workflow.execute = execute_after_checks
    if create_report is not None:
        workflow.create_report = report_after_checks


# Snakemake's --max-jobs-per-timespan when not given: (jobs, seconds)
DEFAULT_RATE_LIMIT = (100, 1)


def quiet_scheduler(workflow, plugin) -> bool:
    """Drop the job rate limit of a run on this machine (Snakemake's local executor, not a job inside a cluster job)
    when it is Snakemake's default, 100 jobs a second; a limit given on the command line otherwise is kept, and so is
    every limit of a cluster executor, where it paces submissions.  Returns whether it was dropped.

    With a limit, each pass of Snakemake's scheduling loop (``JobScheduler.schedule``) that finds jobs ready ends by
    starting a 1-second ``threading.Timer`` that runs the loop again, which starts another: every event that ran the
    loop (a job's end, another timer) leaves a chain of passes once a second until the run ends, each validating the
    ready jobs, resetting their params and resources and stat-ing their inputs.  In a default run (80 jobs, 19 min)
    that was 11,000 timer threads by its 10th minute, Snakemake's own process at 6 % of a core by then and 19 % in
    its last minutes (beside the timed jobs that hold every core), 103 CPU-seconds in all.  A local run needs no
    pacing: its loop runs when a job ends (Snakemake's executor wakes it), as it does without a limit.  Counted by
    tests/test_workflow.py (no timer in a local run) and tests/test_timeline.py (which limits stay)."""
    if getattr(workflow, "remote_exec", False) or not getattr(
        getattr(plugin, "common_settings", None), "local_exec", False
    ):
        return False
    settings = getattr(workflow, "scheduling_settings", None)
    limit = getattr(settings, "max_jobs_per_timespan", None)
    if limit is None or (limit.max_jobs, limit.timespan) != DEFAULT_RATE_LIMIT:
        return False
    settings.max_jobs_per_timespan = None
    return True


def chain_priorities(workflow, seconds: dict[str, float]) -> bool:
    """Every rule's priority becomes its jobs' remaining chain (:mod:`unie.config.priorities`) over the DAG
    Snakemake built: a function of the job's wildcards that Snakemake calls for each job that must run, once the
    DAG is complete (``DAG.update_priority``); the chains of all such jobs are computed at the first call and again
    when the jobs that must run change.  ``seconds``: each job's expected seconds (job key -> s,
    :func:`unie.pipeline.job_records.expected_seconds`).  With nothing measured (``seconds`` empty) the rules keep
    their own priorities, and a job the DAG does not hold (not expected) gets its rule's own.  Returns whether the
    priorities were set."""
    if not seconds:
        return False
    state = {"jobs": None, "chains": {}}

    def chains() -> dict[str, float]:
        dag = workflow.dag
        jobs = frozenset(dag.needrun_jobs()) if dag is not None else frozenset()
        if jobs != state["jobs"]:
            key = {job: job_key(job.rule.name, job.wildcards_dict) for job in jobs}
            own = {key[j]: 0.0 if j.is_norun else own_seconds(key[j], seconds) or 0.0 for j in jobs}
            consumers = {key[j]: {key[c] for c in dag.depending.get(j, {}) if c in key} for j in jobs}
            state["jobs"], state["chains"] = jobs, remaining_chains(own, consumers)
        return state["chains"]

    def rule_priority(name: str, fallback):
        def priority(wildcards):
            try:
                return round(chains().get(job_key(name, dict(wildcards.items())), fallback), 1)
            except Exception:  # noqa: BLE001 - Snakemake internals of another version: the rule's own priority
                return fallback

        return priority

    for rule in workflow.rules:
        if not callable(rule.priority):  # a rule's own function stays
            rule.priority = rule_priority(rule.name, rule.priority)
    return True


class StopReport:
    """The ending of a run stopped by SIGTERM (module doc): :meth:`started` from the Snakefile's ``onstart`` (after
    Snakemake installed its own handler, which still runs), :meth:`ended` from its ``onerror``."""

    def __init__(self):
        self.signalled = False

    def started(self) -> None:
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            self.signalled = True
            if callable(previous):
                previous(signum, frame)

        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            pass

    def ended(self, workflow, log=_say) -> None:
        """After a SIGTERM: one line on what ran, and exit 1 when no job failed (else Snakemake's error follows)."""
        if not self.signalled:
            return
        scheduler = getattr(workflow, "scheduler", None)
        failed = len(getattr(scheduler, "failed", ()) or ())
        dag = workflow.dag
        done = sum(1 for job in dag.finished_jobs if not job.is_norun)
        left = sum(1 for job in dag.needrun_jobs() if not job.is_norun)
        if failed:
            log(f"unie: stopped by SIGTERM: {done} jobs finished, {failed} failed (see above), {left} not started")
            return
        log(
            f"unie: stopped by SIGTERM: the running jobs finished ({done} in this run), none failed; {left} not "
            "started: rerun the same command to continue"
        )
        raise SystemExit(1)
