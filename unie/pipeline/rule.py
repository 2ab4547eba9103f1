"""The context every rule's script runs in (``workflow/scripts/*.py``)."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

from ..core.integrity import write_json  # noqa: F401  (rules import it from here: atomic, never half-written)


def operator_errors() -> tuple[type, ...]:
    """Errors that are the input's fault (a bad config, a missing or damaged file, a checkpoint in use): a job
    that fails with one reports its one-line message on the console; the traceback stays in the job's log."""
    from ..core.config import ConfigError
    from ..core.integrity import DamagedFileError
    from ..core.train import CheckpointBusyError, NonFiniteLossError
    from ..data.hf import HubUnreachableError
    from ..models.checkpoint import CheckpointError
    from .launch import RankError
    from .prefetch import PrefetchError

    return (ConfigError, DamagedFileError, CheckpointError, CheckpointBusyError, NonFiniteLossError,
            HubUnreachableError, RankError, PrefetchError, FileNotFoundError, PermissionError)


def job_precision(snakemake, device: str | None = None) -> str:
    """The precision a rule's job runs its networks in (docs/precision.md): the rule's ``params.precision``
    (absent: ``fp32``; ``precision_params()`` in workflow/rules/common.smk passes it) on ``device`` (default: the
    rule's ``params.device``), through :func:`unie.core.precision.for_device`, so a CPU runs ``fp32`` whatever the
    config says.  The one place every script that runs a model reads it from."""
    from ..core.precision import for_device

    p = snakemake.params
    return for_device(p.get("precision", "fp32"), p.device if device is None else device)


@contextmanager
def job(snakemake, name: str | None = None):
    """Context for a rule's script: logs (stdout, stderr, logging) go to ``snakemake.log[0]``;
    torch uses the rule's threads.  Yields a ``log(str)`` function.

    A job that fails with one of :func:`operator_errors` prints ``unie: error: <message>`` (one line, naming the
    file or key and the fix) to the console and exits with status 1; any other exception propagates with its
    traceback.  Both are written to the log with their traceback."""
    import torch

    torch.set_num_threads(max(1, int(snakemake.threads)))
    logpath = snakemake.log[0] if len(snakemake.log) else None
    stream = open(logpath, "w", buffering=1) if logpath else sys.stderr
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = stream
    logging.basicConfig(stream=stream, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    log = logging.getLogger(name or "unie").info
    failure = None
    try:
        yield log
    except BaseException as e:
        import traceback

        traceback.print_exc(file=stream)
        if isinstance(e, operator_errors()):
            failure = e
        else:
            raise
    finally:
        sys.stdout, sys.stderr = old_out, old_err
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
