"""Data parallelism for the training loop (:func:`unie.core.train.train`) under ``torch.distributed``.

* :func:`world`: ``(rank, world size)``; ``(0, 1)`` when no process group is initialised.
* :func:`init_from_env`: the process group of a torchrun worker (nccl on CUDA, gloo on CPU) and its device.
* :func:`broadcast_state`: rank 0's weights on every rank (what DDP does when it wraps a module).
* :func:`all_reduce_gradients`: every rank's ``.grad`` replaced by the sum over ranks.

Why not ``DistributedDataParallel``: the methods' losses use attributes of the *bare* network (``net.cfg`` in
every ``wrap``, ``net.embed.weight`` in Duo's curriculum), which a DDP wrapper hides behind ``.module``, and DDP
only synchronises gradients of a forward that went through the wrapper.  So the loop keeps the bare network and,
after the rank's last micro-batch, all-reduces the gradients itself, bucket by bucket -- DDP's reduction without
its overlap with the backward pass.  DDP *averages* over ranks; here each micro-batch loss is already divided by
the global number of micro-batches, so the *sum* over ranks is the mean over the whole batch.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env(device: str = "cpu", timeout: timedelta | None = None) -> str:
    """Initialise the default process group from torchrun's environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``) and return this rank's device: ``cuda:LOCAL_RANK`` (backend nccl)
    when the configured ``device`` is CUDA, else ``cpu`` (backend gloo).  ``timeout``: of the collectives
    (torch's default when None; the lm-eval adapter waits longer, :func:`unie.dllm.lmeval.join_world`)."""
    kw = {} if timeout is None else {"timeout": timeout}
    if "LOCAL_RANK" not in os.environ:
        raise RuntimeError("init_from_env: no LOCAL_RANK in the environment (start the process with torchrun)")
    local_rank = int(os.environ["LOCAL_RANK"])
    if str(device).startswith("cuda"):
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"rank with LOCAL_RANK={local_rank} has no GPU ({torch.cuda.device_count()} visible)")
        rank_device = f"cuda:{local_rank}"
        torch.cuda.set_device(rank_device)
        dist.init_process_group("nccl", device_id=torch.device(rank_device), **kw)
    else:
        rank_device = "cpu"
        dist.init_process_group("gloo", **kw)
    return rank_device


def barrier() -> None:
    """Wait for every rank (nothing to do in a single process)."""
    if world()[1] > 1:
        dist.barrier()


def broadcast_state(*modules: torch.nn.Module, src: int = 0) -> None:
    """Overwrite every parameter and buffer of ``modules`` with rank ``src``'s (in place)."""
    if world()[1] == 1:
        return
    for module in modules:
        for t in module.state_dict().values():
            dist.broadcast(t, src)


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj`` (picklable) on every rank; ``obj`` itself in a single process."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src)
    return box[0]


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over ranks, in place (returned for chaining)."""
    if world()[1] > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_gradients(params: list[torch.nn.Parameter], bucket_numel: int = 1 << 24) -> None:
    """Replace each ``p.grad`` by its sum over ranks.

    A parameter without a gradient on some ranks gets zeros there; one without a gradient on every rank keeps
    ``grad = None`` (so AdamW skips it, as in a single process).  Gradients are flattened into buckets of at
    most ``bucket_numel`` elements per dtype and device, one all-reduce per bucket."""
    if world()[1] == 1:
        return
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    if any(p.grad is not None and p.grad.is_sparse for p in params):
        raise NotImplementedError("all_reduce_gradients: sparse gradients are not supported")
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=params[0].device)
    all_reduce_sum(has)
    live = [p for p, h in zip(params, has.tolist()) if h > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    groups: dict = {}
    for p in live:
        groups.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    for group in groups.values():
        for bucket in _buckets(group, bucket_numel):
            flat = all_reduce_sum(torch.cat([p.grad.reshape(-1) for p in bucket]))
            for p, g in zip(bucket, flat.split([p.numel() for p in bucket])):
                p.grad.copy_(g.view_as(p.grad))


def _buckets(params: list, limit: int):
    """Consecutive runs of ``params`` with at most ``limit`` elements in all (a larger tensor is alone)."""
    bucket, size = [], 0
    for p in params:
        if bucket and size + p.numel() > limit:
            yield bucket
            bucket, size = [], 0
        bucket.append(p)
        size += p.numel()
    if bucket:
        yield bucket


__all__ = [
    "all_reduce_gradients",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "broadcast_state",
    "init_from_env",
    "world",
]
