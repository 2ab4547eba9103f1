"""Running a training rule in this process, or data-parallel under torchrun (rules ``train`` and ``dllm_train``).

:func:`run_training` calls a trainer of :data:`TRAINERS` (:func:`~unie.pipeline.models.train_from_spec`,
:func:`~unie.pipeline.dllm.train_dllm_model`) with keyword arguments:

* one process (:func:`processes` is 1: the default profile, or one GPU): a plain call;
* N > 1 processes: the arguments go to a JSON file and
  ``python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=N -m unie.pipeline.launch FILE``
  starts N ranks; each runs :func:`main` (process group from torchrun's environment, nccl on ``cuda:LOCAL_RANK``
  or gloo on CPU, see :func:`unie.core.distributed.init_from_env`) and calls the same trainer.  Rank 0 logs and
  writes the outputs; everything the ranks print is copied to this process's stderr (the rule's log).

The trajectory does not depend on N when the model's ``train.shards`` is set (:mod:`unie.core.train`).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

TRAINERS = {
    "models": "unie.pipeline.models:train_from_spec",
    "dllm": "unie.pipeline.dllm:train_dllm_model",
}


def trainer(name: str) -> Callable:
    """The training function registered as ``name`` in :data:`TRAINERS`."""
    if name not in TRAINERS:
        raise KeyError(f"unknown trainer {name!r}; known: {sorted(TRAINERS)}")
    module, func = TRAINERS[name].split(":")
    return getattr(importlib.import_module(module), func)


def processes(gpu: int, device: str, forced: int | None = None) -> int:
    """How many training processes a rule runs: ``forced`` when given (a config's ``resources.<rule>.processes``,
    e.g. ranks on CPU for a test), else its ``gpu`` count on a CUDA device, else 1."""
    if forced is not None:
        if int(forced) < 1:
            raise ValueError(f"processes must be >= 1, got {forced}")
        return int(forced)
    return max(1, int(gpu)) if str(device).startswith("cuda") else 1


def rule_processes(snakemake) -> int:
    """:func:`processes` of a training rule's job: its ``resources.gpu``, ``params.device`` and
    ``params.processes`` (``config['resources'][rule]['processes']``, null unless forced)."""
    return processes(snakemake.resources.get("gpu", 0), snakemake.params.device, snakemake.params.processes)


def torchrun_command(nproc: int, args_file, entry: tuple[str, ...] = ("unie.pipeline.launch",)) -> list[str]:
    """The command that starts ``nproc`` ranks of ``python -m *entry ARGS_FILE`` on this node (``--standalone``: a
    free port); the default entry is :func:`main`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc_per_node={nproc}", "-m", *entry, str(args_file)]


class RankError(RuntimeError):
    """A rank stopped on an input error (:func:`unie.pipeline.rule.operator_errors`): its one-line message."""


@contextmanager
def reporting_rank_errors(args_file):
    """Around a rank's work: an input error is written beside ``ARGS.json`` (``error.RANK.txt``, one line) before it
    propagates, so that :func:`run_ranks` raises it as one line instead of "torchrun exited with status 1"."""
    from .rule import operator_errors

    try:
        yield
    except operator_errors() as e:
        rank = os.environ.get("RANK", "0")
        Path(args_file).with_name(f"error.{rank}.txt").write_text(" ".join(str(e).split()))
        raise


def run_ranks(nproc: int, entry: tuple[str, ...], payload: dict, tmp, log: Callable[[str], None], threads: int,
              what: str) -> None:
    """Start ``nproc`` ranks of ``python -m *entry ARGS.json`` under torchrun and wait for them.

    ``ARGS.json`` (in the directory ``tmp``) holds ``payload`` plus ``threads``: each rank's torch threads,
    ``threads // nproc`` (at least 1, also its ``OMP_NUM_THREADS``).  What the ranks print is copied to this
    process's stderr (a rule's log); a failed rank raises :class:`RuntimeError`.  Used by :func:`run_training` and
    :func:`unie.lmeval.run_evaluation`."""
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


def run_training(name: str, kwargs: dict, nproc: int = 1, log: Callable[[str], None] = print, threads: int = 1):
    """Run trainer ``name`` with ``kwargs`` (JSON-serialisable, without ``log``) in ``nproc`` processes.

    Returns the trainer's ``(ema, history)`` in one process; with torchrun ``None`` (the outputs are the files
    rank 0 wrote).  A failed rank raises :class:`RuntimeError` here."""
    if nproc <= 1:
        return trainer(name)(**kwargs, log=log)
    trainer(name)  # an unknown name fails here, not in N processes
    with tempfile.TemporaryDirectory(prefix="unie-launch-") as tmp:
        run_ranks(nproc, ("unie.pipeline.launch",), {"trainer": name, "kwargs": kwargs}, tmp, log, threads,
                  "data-parallel training")
    return None


def main(argv: list[str] | None = None) -> None:
    """One rank: ``python -m unie.pipeline.launch ARGS.json`` under torchrun (see the module doc)."""
    import logging

    import torch

    from ..core.distributed import barrier, init_from_env

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: torchrun ... -m unie.pipeline.launch ARGS.json")
    args = json.loads(Path(argv[0]).read_text())
    torch.set_num_threads(int(args.get("threads", 1)))
    kwargs = dict(args["kwargs"])
    kwargs["device"] = init_from_env(kwargs.get("device", "cpu"))
    rank = torch.distributed.get_rank()
    if rank == 0:
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
        log = logging.getLogger("unie").info
    else:
        def log(_msg):
            pass
    with reporting_rank_errors(argv[0]):
        trainer(args["trainer"])(**kwargs, log=log)
    barrier()  # rank 0 has written the outputs before any rank leaves
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
