"""Running a training rule in this process, or data-parallel under torchrun (rules ``train`` and ``dllm_train``).

:func:`run_training` calls a trainer of :data:`TRAINERS` (:func:`~unie.pipeline.model_files.train_from_spec`,
:func:`~unie.pipeline.dllm_runs.train_dllm_model`) with keyword arguments:

* one process (:func:`processes` is 1: the default profile, or one GPU): a plain call;
* N > 1 processes: the arguments go to a JSON file and
  ``python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=N -m unie.pipeline.launch FILE``
  starts N ranks; each runs :func:`main` (process group from torchrun's environment, nccl on ``cuda:LOCAL_RANK``
  or gloo on CPU, see :func:`unie.core.distributed.init_from_env`) and calls the same trainer.  Rank 0 logs and
  writes the outputs; everything the ranks print is copied to this process's stderr (the rule's log).

The trajectory does not depend on N when the model's ``train.shards`` is set (:mod:`unie.core.train`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..core.ranks import reporting_rank_errors, run_ranks
from .dllm_runs import train_dllm_model
from .model_files import train_from_spec

ENTRY = ("unie.pipeline.launch",)  # what each rank runs: main()
TRAINERS = {"models": train_from_spec, "dllm": train_dllm_model}


def trainer(name: str) -> Callable:
    """The training function registered as ``name`` in :data:`TRAINERS`."""
    if name not in TRAINERS:
        raise KeyError(f"unknown trainer {name!r}; known: {sorted(TRAINERS)}")
    return TRAINERS[name]


def processes(gpu: int, device: str, forced: int | None = None) -> int:
    """How many training processes a rule runs: ``forced`` when given (a config's ``resources.<rule>.processes``,
    e.g. ranks on CPU for a test), else its ``gpu`` count on a CUDA device, else 1."""
    if forced is not None:
        if int(forced) < 1:
            raise ValueError(f"processes must be >= 1, got {forced}")
        return int(forced)
    return max(1, int(gpu)) if str(device).startswith("cuda") else 1


def rule_processes(snakemake) -> int:
    """:func:`processes` of a training or lm-eval rule's job: its GPUs (``resources.gpu``, or ``gpus`` where the site
    asks for them by GRES: :func:`unie.config.settings.job_gpus`), ``params.device`` and, where the rule has it (the
    training rules), ``params.processes`` (``config['resources'][rule]['processes']``, null unless forced)."""
    from ..config.settings import job_gpus

    forced = getattr(snakemake.params, "processes", None)
    return processes(job_gpus(snakemake.resources), snakemake.params.device, forced)


def run_training(name: str, kwargs: dict, nproc: int = 1, log: Callable[[str], None] = print, threads: int = 1):
    """Run trainer ``name`` with ``kwargs`` (JSON-serialisable, without ``log``) in ``nproc`` processes.

    Returns the trainer's ``(ema, history)`` in one process; with torchrun ``None`` (the outputs are the files
    rank 0 wrote).  A failed rank raises :class:`RuntimeError` here."""
    if nproc <= 1:
        return trainer(name)(**kwargs, log=log)
    trainer(name)  # an unknown name fails here, not in N processes
    with tempfile.TemporaryDirectory(prefix="unie-launch-") as tmp:
        run_ranks(nproc, ENTRY, {"trainer": name, "kwargs": kwargs}, tmp, log, threads, "data-parallel training")
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
