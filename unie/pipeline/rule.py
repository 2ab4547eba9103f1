"""The context every rule's script runs in (``workflow/scripts/*.py``)."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager

from ..core import integrity
from ..core.errors import OPERATOR_ERRORS
from ..core.imports import around_import

_JOB = None  # the running rule's snakemake object (inside job())


def _job_files(snakemake, kind: str = "input") -> list[str]:
    """The paths of a job's ``input`` or ``output`` files, each once, in order
    (:func:`unie.pipeline.job_records.job_files`)."""
    from .job_records import job_files

    return job_files(getattr(snakemake, kind, None))


def _provenance() -> tuple[str | None, dict | None]:
    """``(made_by, made_from)`` inside a rule's job: the rule's name and the identities of every file the job reads
    (:func:`unie.pipeline.damage.identities`, whatever the file holds); ``(None, None)`` outside one."""
    if _JOB is None:
        return None, None
    from .damage import identities

    made_by = getattr(_JOB, "rule", None)
    return (made_by if isinstance(made_by, str) else None), identities(_job_files(_JOB))


def write_json(obj, path, indent: int | None = 2, *, records=None, **kw):
    """A result file (:func:`unie.core.integrity.write_json`: atomic, with its content hash and ``records``); inside
    a rule's job also the rule (``made_by``) and the identities of the job's inputs (``made_from``,
    :func:`unie.pipeline.damage.identities`), so that a later run remakes it when one of them is replaced."""
    made_by, made_from = _provenance()
    return integrity.write_json(obj, path, indent, made_by=made_by, made_from=made_from, records=records, **kw)


def record_pages(snakemake) -> list:
    """After a job: the record of each of its tables and figures (outputs with a suffix of
    :data:`unie.core.integrity.PAGE_SUFFIXES`: CSV, LaTeX, Markdown, PNG, PDF, HTML), beside it
    (:func:`unie.core.integrity.write_page_record`), with the rule and the identities of the job's inputs."""
    pages = [f for f in _job_files(snakemake, "output") if f.endswith(integrity.PAGE_SUFFIXES) and os.path.isfile(f)]
    if not pages:
        return []
    made_by, made_from = _provenance()
    return [integrity.write_page_record(f, made_by, made_from) for f in pages]


class _Log:
    """A job's log file, reopened when another run removes it: Snakemake deletes a job's log before it runs the job
    again, also while an earlier job (left running by a ``kill -9`` of snakemake) still writes to it.  That job then
    finds its file gone at its next line, copies what it wrote so far to the new file under the refused job's
    lines, and goes on there: no line of either job is lost."""

    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "a+", buffering=1)

    def _reopen_if_removed(self):
        try:
            if os.fstat(self.f.fileno()).st_nlink > 0:
                return
        except (OSError, ValueError):
            return
        try:
            new = open(self.path, "a+", buffering=1)
        except OSError:  # its folder is gone too: go on in the removed file
            return
        old, self.f = self.f, new
        old.flush()
        old.seek(0)
        new.write(
            f"--- pid {os.getpid()}: this log was replaced by another run's job; its earlier lines, then its "
            "next ones ---\n" + old.read()
        )
        old.close()

    def write(self, text):
        self._reopen_if_removed()
        return self.f.write(text)

    def flush(self):
        self.f.flush()

    def fileno(self):
        return self.f.fileno()

    def isatty(self):
        return False

    def close(self):
        self.f.close()

    def __getattr__(self, name):  # encoding, errors, buffer, ...: the file's
        return getattr(self.f, name)


class Heartbeat:
    """While a job runs, a line on the console every :attr:`every` seconds (its log has the rest): the rule, its
    wildcards, how long it has run and the last line its log shows (a training's or lm-eval's progress bar), so a
    run is never silent for minutes.  A daemon thread; :meth:`stop` ends it."""

    every = 60.0

    def __init__(self, snakemake, logpath: str | None, started: float):
        import threading

        from .job_records import job_name

        self.rule, wc = job_name(snakemake)
        self.name = self.rule + (f" ({', '.join(f'{k}={v}' for k, v in wc.items())})" if wc else "")
        self.logpath, self.started = logpath, started
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def last_line(self) -> str:
        if not self.logpath:
            return ""
        try:
            with open(self.logpath, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [x.strip() for x in tail.replace("\r", "\n").split("\n") if x.strip()]
        return lines[-1][-160:] if lines else ""

    def _run(self):
        import time

        while not self._done.wait(self.every):
            minutes = (time.time() - self.started) / 60
            last = self.last_line()
            print(
                f"unie: {self.name} running {minutes:.0f} min"
                + (f"; {last}" if last else "")
                + (f" (log: {self.logpath})" if self.logpath else ""),
                file=sys.__stderr__,
                flush=True,
            )

    def start(self):
        self._thread.start()

    def stop(self):
        self._done.set()


def job_precision(snakemake) -> str:
    """The precision a rule's job runs its networks in (docs/precision.md): the rule's ``params.precision``, the
    workflow's :attr:`~unie.config.settings.WorkflowSettings.job_precision` (``fp32`` on a CPU) that
    ``precision_params()`` in workflow/rules/common.smk passes; absent: ``fp32`` (an fp32 job's params are those of
    before the option).  The one place every script that runs a model reads it from."""
    from ..core.precision import check_precision

    return check_precision(snakemake.params.get("precision", "fp32"))


def torch_threads(threads: int) -> None:
    """torch uses ``threads`` threads: set now when torch is imported, else as it is imported
    (:func:`unie.core.imports.around_import`), so that a job that imports no torch (a table, a figure, a page) does
    not load it for this."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
        return

    def then_set_threads(exec_module, module):
        exec_module(module)
        module.set_num_threads(threads)

    around_import("torch", then_set_threads)


@contextmanager
def job(snakemake, name: str | None = None):
    """Context for a rule's script: in a local run, the script runs again in a fork of the run's warm server
    (:func:`unie.pipeline.warm.delegate`: torch imported once per run, not once per job) and this process waits for it
    and exits with its status; else here.  Logs (stdout, stderr, logging) go to ``snakemake.log[0]``;
    torch uses the rule's threads (:func:`torch_threads`).  Yields a ``log(str)`` function.  When the script ends, its tables and figures
    get their records (:func:`record_pages`).

    A job that fails with one of :data:`unie.core.errors.OPERATOR_ERRORS` (an input's fault) prints ``unie: error: <message>`` (one line, naming the
    file or key and the fix) to the console and exits with status 1; any other exception propagates with its
    traceback.  Both are written to the log with their traceback."""
    global _JOB
    import time

    from .job_records import process_started, record_job
    from .warm import delegate

    started = min(time.time(), process_started())  # the job's process, its imports included
    delegate(snakemake, started)  # a local run's warm server runs this script from its first line; this process exits
    torch_threads(max(1, int(snakemake.threads)))
    logpath = snakemake.log[0] if len(snakemake.log) else None
    beat = Heartbeat(snakemake, logpath, started)
    stream = _Log(logpath) if logpath else sys.stderr
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = stream
    # the root logger writes to the job's log while it runs (as basicConfig(force=True) would), and gets its own
    # handlers back afterwards: a job run in a longer-lived process (a test) leaves no handler on a closed log behind
    root = logging.getLogger()
    saved_logging = root.handlers[:], root.level
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    log = logging.getLogger(name or "unie").info
    failure = None
    _JOB = snakemake
    ok = False
    beat.start()
    try:
        yield log
        record_pages(snakemake)  # the job's tables and figures, now written: their records beside them
        ok = True
    except BaseException as e:
        import traceback

        traceback.print_exc(file=stream)
        if isinstance(e, OPERATOR_ERRORS):
            failure = e
        else:
            raise
    finally:
        beat.stop()
        record_job(snakemake, started, time.time(), ok)
        _JOB = None
        sys.stdout, sys.stderr = old_out, old_err
        root.handlers[:], level = saved_logging
        root.setLevel(level)
        if logpath:
            stream.close()
    if failure is not None:
        from ..core.integrity import DamagedFileError
        from .damage import report_damaged

        if isinstance(failure, DamagedFileError):  # the next run sets it aside and rebuilds it
            report_damaged(failure.path)
        message = " ".join(str(failure).split())  # one line
        print(f"unie: error: {message}" + (f" (log: {logpath})" if logpath else ""), file=sys.stderr)
        raise SystemExit(1)
