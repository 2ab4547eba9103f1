"""N ranks of one job on this node under torchrun (a data-parallel ``train``, ``dllm_train`` or ``dllm_eval``).

:func:`run_ranks` writes the job's arguments to ``ARGS.json``, starts ``python -m <entry> ARGS.json`` on N
processes with ``python -m torch.distributed.run --standalone`` (:func:`torchrun_command`), copies what they print
to this process's stderr (a rule's log) and waits.  A rank wraps its work in :func:`reporting_rank_errors`, so that
an input error (:data:`unie.core.errors.OPERATOR_ERRORS`) on a rank is raised here as its own one line
(:class:`RankError`) instead of "torchrun exited with status 1".  Each rank's process group is
:func:`unie.core.distributed.init_from_env`'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from .errors import OPERATOR_ERRORS, InputError


def torchrun_command(nproc: int, args_file, entry: tuple[str, ...]) -> list[str]:
    """The command that starts ``nproc`` ranks of ``python -m *entry ARGS_FILE`` on this node (``--standalone``: a
    free port)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        "-m",
        *entry,
        str(args_file),
    ]


class RankError(InputError, RuntimeError):
    """A rank stopped on an input error: its one-line message."""


@contextmanager
def reporting_rank_errors(args_file):
    """Around a rank's work: an input error is written beside ``ARGS.json`` (``error.RANK.txt``, one line) before it
    propagates, so that :func:`run_ranks` raises it as one line."""
    try:
        yield
    except OPERATOR_ERRORS as e:
        rank = os.environ.get("RANK", "0")
        Path(args_file).with_name(f"error.{rank}.txt").write_text(" ".join(str(e).split()))
        raise


def run_ranks(
    nproc: int, entry: tuple[str, ...], payload: dict, tmp, log: Callable[[str], None], threads: int, what: str
) -> None:
    """Start ``nproc`` ranks of ``python -m *entry ARGS.json`` under torchrun and wait for them.

    ``ARGS.json`` (in the directory ``tmp``) holds ``payload`` plus ``threads``: each rank's torch threads,
    ``threads // nproc`` (at least 1, also its ``OMP_NUM_THREADS``).  What the ranks print is copied to this
    process's stderr (a rule's log); a rank's input error raises :class:`RankError`, any other failure
    :class:`RuntimeError`.  Used by :func:`unie.pipeline.launch.run_training` and
    :func:`unie.dllm.lmeval.run_evaluation`."""
    per_rank = max(1, threads // nproc)
    args_file = Path(tmp, "args.json")
    args_file.write_text(json.dumps({**payload, "threads": per_rank}, default=str))
    cmd = torchrun_command(nproc, args_file, entry)
    log(f"{what} on {nproc} processes: {' '.join(cmd)}")
    env = {**os.environ, "OMP_NUM_THREADS": str(per_rank)}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        for line in proc.stdout:
            sys.stderr.write(line)
        rc = proc.wait()
    if rc != 0:
        reported = sorted(Path(tmp).glob("error.*.txt"), key=lambda f: int(f.name.split(".")[1]))
        if reported:  # an input error on a rank: its own one-line message
            raise RankError(reported[0].read_text())
        raise RuntimeError(f"torchrun with {nproc} processes exited with status {rc} (its output is above)")
