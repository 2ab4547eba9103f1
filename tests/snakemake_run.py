"""``snakemake ARGS`` for the workflow tests, run in the test's own process: Snakemake's and the workflow's modules are
imported once per pytest process instead of once per command (a dry run: 5-6 s in a new process, about 1 s here),
while everything a command can show is kept as a separate process shows it.

* Its output: file descriptors 1 and 2 point at two files while it runs, so what Snakemake, the Snakefile and every
  job it starts (a script job is its own process, which inherits them) print is captured, each on the stream it
  chose; returned as :class:`subprocess.CompletedProcess` (``returncode`` from Snakemake's ``sys.exit``).
* What it changes in the process is put back afterwards: the working directory (``-d``), ``os.environ`` (the
  Snakefile sets the jobs' variables), ``sys.path``, and the SIGTERM handler Snakemake's scheduler installs.
* A command that needs a process of its own is given one (``separate=True``): one that is signalled or killed, one
  whose imports are counted (tests/startup_probe.py), one with its own environment (``env``) or a time limit
  (``timeout``).  ``UNIE_TESTS_SNAKEMAKE=subprocess`` gives every command a process of its own (the way to check
  that a failure is not the sharing's).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import threading

_ONE_AT_A_TIME = threading.Lock()


def run_snakemake(
    args, cwd, *, env: dict | None = None, timeout: float | None = None, separate: bool = False
) -> subprocess.CompletedProcess:
    """``python -m snakemake ARGS`` with ``cwd`` as the working directory; see the module's doc for where."""
    args = [str(a) for a in args]
    cmd = [sys.executable, "-m", "snakemake", *args]
    if separate or env is not None or timeout is not None or os.environ.get("UNIE_TESTS_SNAKEMAKE") == "subprocess":
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    from snakemake.cli import main

    with _ONE_AT_A_TIME, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved_fds = os.dup(1), os.dup(2)
        saved = (os.getcwd(), dict(os.environ), list(sys.path), sys.stdout, sys.stderr)
        saved_term = signal.getsignal(signal.SIGTERM)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        code = 0
        try:
            os.chdir(cwd)
            main(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # what Snakemake lets through: on the captured stderr, as a process would print it
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            cwd_before, environ, path, sys.stdout, sys.stderr = saved
            os.chdir(cwd_before)
            os.environ.clear()
            os.environ.update(environ)
            sys.path[:] = path
            signal.signal(signal.SIGTERM, saved_term)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
    return subprocess.CompletedProcess(cmd, code, texts[0], texts[1])
