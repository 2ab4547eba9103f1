"""The one training loop every method uses (MDLM recipe): AdamW, linear warm-up then constant LR,
gradient clipping, an EMA of the weights, a checkpoint every ``ckpt_every`` steps and resumption from
the last checkpoint after an interruption.

Determinism: the batch indices and the loss's randomness at step ``k`` come from generators seeded by
``(seed, k)``, so a resumed run follows the uninterrupted one exactly (tested).

Shards and data parallelism: the global batch (``batch_size`` rows from stream 0) is cut into ``cfg.shards``
equal consecutive micro-batches; micro-batch ``s`` draws its loss randomness from stream ``1 + s`` (and reseeds
dropout for ``(step, s)``), and the gradient is the mean of the micro-batch gradients.  Under
``torch.distributed`` rank ``r`` of ``W`` computes micro-batches ``r, r + W, ...`` and the gradients are summed
over ranks (:mod:`unie.core.distributed`), so the batches and random streams depend on ``shards``, never on
``W``; the trajectory too, up to the order of the floating-point sums of the gradients (bit for bit when every
rank holds one shard: ``shards == W``, tested; ``shards = 4`` on 2 ranks sums ``(g0 + g2) + (g1 + g3)`` where
one process sums ``((g0 + g1) + g2) + g3``).  One shard is exactly the single-batch loop.  Only rank 0 logs and
writes ``last.pt``; every rank resumes from it.

Resuming (:func:`load_resume_state`): ``last.pt`` is resumed only when it was written for the same *run
specification* (:func:`run_spec`: every training option, steps and schedule included, the architecture, the
method and its options, a content hash of the data, the initial weights and any frozen partner model); any other
``last.pt`` is not resumed (a log line names what changed; the new run's first checkpoint replaces it) and
training starts from step 0.  A ``last.pt``
that cannot be read is reported in one line and discarded.  Checkpoints are written atomically (a full disk
leaves the previous one usable), and a lock in the checkpoint directory keeps two processes (a rerun beside an
orphaned job) from training into it at once.

Reading order: :func:`train` takes the lock; ``_train`` is the procedure, and below it come its parts in the order
it uses them: :class:`TrainState` (what a run carries between steps), :func:`length_buckets`, :func:`start_state`,
:func:`restore` (a resumed ``last.pt``), :func:`select_best`, :func:`evaluate_dev`, :func:`draw_batch` (the global
batch), :func:`train_step` (:func:`micro_batch_losses`, :func:`update_ema`), :func:`log_progress`,
:func:`save_checkpoint`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Callable

import torch

from .options import TrainConfig, make_options
from .distributed import all_reduce_gradients, all_reduce_sum, barrier, broadcast_object, broadcast_state, world
from .errors import InputError
from .integrity import atomic_write
from .precision import autocast, check_precision, widen


class NonFiniteLossError(InputError, FloatingPointError):
    pass


class CheckpointBusyError(InputError, RuntimeError):
    """Another process holds the lock of a checkpoint directory."""


def initial_network(build, seed: int):
    """``build()`` with the global RNG seeded by ``seed`` and restored afterwards: a network's initial weights are a
    function of its training seed (``TrainConfig.seed``, which the top-level config seed fills:
    :mod:`unie.config.seeds`) and of nothing that ran before in the process."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _step_generator(seed: int, step: int, stream: int, device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + step * 7919 + stream) % (2**63 - 1))
    return g


def _dropout_seed(seed: int, step: int, shard: int) -> int:
    """The global RNG's seed for micro-batch ``shard`` of ``step`` (dropout); shard 0 keeps the one-batch seed."""
    return seed * 1_000_003 + step + shard * (1 << 32)


def shard_plan(cfg: TrainConfig, rank: int, world_size: int) -> tuple[int, range]:
    """``(shards, this rank's shard indices)``: ``cfg.shards`` (None = ``world_size``) and ``rank, rank + world,
    ...``.  Errors name the problem: a batch that does not split into the shards, shards not a multiple of
    the world size."""
    shards = world_size if cfg.shards is None else cfg.shards
    if cfg.batch_size % shards:
        raise ValueError(
            f"batch_size={cfg.batch_size} is not divisible by shards={shards}"
            + (f" (shards unset: the world size {world_size})" if cfg.shards is None else "")
        )
    if shards % world_size:
        raise ValueError(
            f"shards={shards} is not a multiple of the world size {world_size}: every rank must "
            "compute the same number of micro-batches (set shards to a multiple, or change nproc)"
        )
    return shards, range(rank, shards, world_size)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``cfg.lr`` over ``cfg.warmup`` steps, then constant (MDLM's ``constant_warmup``)."""
    if cfg.warmup <= 0:
        return cfg.lr
    return cfg.lr * min(1.0, (step + 1) / cfg.warmup)


def run_spec(cfg: TrainConfig, extra: dict) -> dict:
    """What makes a checkpoint resumable: every training option (``steps``, the schedule, the seed, checkpoint and
    log cadence: they change the model, its dev selection or its history) and ``extra`` (the architecture, method,
    options, the data's content hash, initial weights, partners: the caller's part).

    ``shards`` counts only when set; the world size never does (a checkpoint resumes on any number of
    processes)."""
    train = {k: v for k, v in dataclasses.asdict(cfg).items() if not (k == "shards" and v is None)}
    return json.loads(json.dumps({"train": train, **extra}, sort_keys=True, default=str))


def run_signature(cfg: TrainConfig, extra: dict) -> str:
    """The hash of :func:`run_spec` (what ``last.pt`` stores to be recognised)."""
    return spec_signature(run_spec(cfg, extra))


def spec_signature(spec) -> str:
    if isinstance(spec, str):
        return spec
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def spec_changes(old: dict | None, new: dict | None, limit: int = 6) -> str:
    """The leaves that differ between two run specifications, as ``a.b: old -> new`` (for the log line that says
    why a checkpoint is not resumed)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "its run specification is not recorded" if not isinstance(old, dict) else "another specification"

    def leaves(d, prefix=""):
        out = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                out.update(leaves(v, key + "."))
            else:
                out[key] = v
        return out

    a, b = leaves(old), leaves(new)
    diff = [
        f"{k}: {_short(a.get(k, '(none)'))} -> {_short(b.get(k, '(none)'))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, "(none)") != b.get(k, "(none)")
    ]
    more = f" (+{len(diff) - limit} more)" if len(diff) > limit else ""
    return "; ".join(diff[:limit]) + more


def _short(v) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, str) else v
    return text if len(text) <= 40 else text[:37] + "..."


# what torch.load raises for bytes that are not a checkpoint: a truncated zip ("PytorchStreamReader failed reading
# zip archive"), garbage (UnpicklingError; random bytes read by the legacy unpickler also give IndexError, TypeError,
# AttributeError, struct.error, OverflowError...), an empty file (EOFError), text (KeyError): every Exception but an
# OSError (the disk, permissions, NFS) or running out of memory, which are raised as they are
_UNREADABLE = (Exception,)
_SYSTEM = (OSError, MemoryError, torch.OutOfMemoryError)


def load_resume_state(last: Path, signature: str, spec: dict | None, log) -> dict | None:
    """The state in ``last`` (on the CPU) if it was written for this run (``signature``), else None.

    Bytes that torch cannot read as a checkpoint (truncated, corrupted: "PytorchStreamReader failed ...") are
    reported in one line and the file is set aside as ``last.pt.unreadable``; an ``OSError`` or an out-of-memory
    error is raised (the file may be fine).  A readable checkpoint for another run specification is left in place
    (the new run's first checkpoint replaces it) and the log names what changed."""
    if not last.exists():
        return None
    try:
        state = torch.load(last, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not {"model", "ema", "opt", "step"} <= set(state):
            raise ValueError("not a training checkpoint (no model/ema/opt/step)")
    except _UNREADABLE as e:
        if isinstance(e, _SYSTEM):
            raise
        why = (str(e).splitlines() or [type(e).__name__])[0]
        aside = last.with_name(last.name + ".unreadable")
        os.replace(last, aside)
        log(
            f"discarding {last}: it cannot be read ({type(e).__name__}: {why}); set aside as {aside.name}, "
            "training starts again from step 0"
        )
        return None
    if state.get("signature") != signature:
        old = json.loads(state["spec"]) if "spec" in state else None
        log(
            f"not resuming {last} (step {int(state['step'])}): it was written for another run specification "
            f"({spec_changes(old, spec)}); training starts from step 0"
        )
        return None
    return state


def resume_state(last: Path, signature: str, spec: dict | None, log) -> dict | None:
    """:func:`load_resume_state` decided by rank 0 alone and followed by every rank (under ``torch.distributed``
    the ranks must agree on the step, the optimiser state and the history; only rank 0 sets a file aside)."""
    rank = world()[0]
    state = load_resume_state(last, signature, spec, log) if rank == 0 else None
    if broadcast_object(state is not None) and rank != 0:  # rank 0 read it: the file is there and readable
        state = torch.load(last, map_location="cpu", weights_only=True)
    return state


@contextlib.contextmanager
def checkpoint_lock(ckpt_dir: Path, enabled: bool = True):
    """An exclusive lock on ``ckpt_dir/.lock`` while a process trains into it; a second process gets
    :class:`CheckpointBusyError` naming the holder (e.g. a training job left running by a killed snakemake).
    The lock goes with its process, however it ends (the file is removed on a normal exit; one left by a killed
    process holds no lock).  A filesystem without locks: a warning, no lock."""
    if not enabled:
        yield
        return
    import fcntl

    path = ckpt_dir / ".lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CheckpointBusyError(
                f"{ckpt_dir} is in use by {holder}: a training job is still writing there "
                "(e.g. one left running after snakemake was killed); wait for it to end or "
                "kill it, then rerun"
            ) from None
        except OSError as e:  # ENOLCK: a network filesystem without locks
            import warnings

            warnings.warn(f"cannot lock {path} ({e}); two runs must not train into {ckpt_dir} at once")
            break
        try:  # the file we locked must still be the one at `path` (its holder removes it when it ends)
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)  # releases the lock


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """How :func:`train` runs a schedule (:class:`~unie.core.options.TrainConfig`): the single home of these
    defaults, built by :func:`~unie.core.options.make_options` from an instance or keywords (an unknown one is an
    error naming it).

    Attributes:
        log: where progress lines go.
        stop_after: stop (after checkpointing) once this step is reached, to simulate an interruption.
        params: the parameters to optimise (default: all of ``net``; NCE passes the trainable subset).
        progress: show a progress bar (rank 0).
        eval_fn: ``ema_net -> dict`` with a ``loss`` (lower is better) on a held-out dev split, run before
            training and at every checkpoint; the EMA weights with the best dev loss are returned
            (model selection on dev, as the paper does for NCE).  If the dict has a ``guard``, a checkpoint
            is admissible only when its guard is not above the initial one's (step 0 is always admissible).
        row_lengths: ``(N,)`` content length of each row; needed when ``cfg.length_buckets > 1`` (length-bucketed
            batches: the rows sorted by length are cut into ``length_buckets`` equal buckets, a step draws one row
            uniformly and takes its whole batch from that row's bucket).
        collate: applied to each micro-batch ``data[idx]`` before the loss (e.g. dropping all-padding columns).
        precision: ``fp32`` | ``tf32`` | ``bf16`` (:mod:`unie.core.precision`): the forward passes and the loss (and
            ``eval_fn``) run under :func:`~unie.core.precision.autocast`; the loss is float32, the backward pass, the
            weights, AdamW's state and the EMA stay float32 (no gradient scaler: bfloat16 has float32's range).
    """

    log: Callable[[str], None] = print
    stop_after: int | None = None
    params: list | None = None
    progress: bool = True
    eval_fn: Callable[[torch.nn.Module], dict] | None = None
    row_lengths: torch.Tensor | None = None
    collate: Callable[[torch.Tensor], torch.Tensor] | None = None
    precision: str = "fp32"

    def __post_init__(self):
        check_precision(self.precision)


def train(
    net: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, torch.Tensor, torch.Generator], torch.Tensor],
    data: torch.Tensor,
    cfg: TrainConfig,
    ckpt_dir,
    signature: str | dict = "",
    options: TrainOptions | None = None,
    **kwargs,
) -> tuple[torch.nn.Module, list[dict]]:
    """Train ``net`` on rows of ``data`` ``(N, L)`` int64; returns ``(ema_net, history)``.

    Args:
        loss_fn: ``(net, x0_batch, generator) -> scalar`` (a method's ``loss``).
        cfg: the schedule.
        ckpt_dir: where ``last.pt`` lives; an existing ``last.pt`` with the same ``signature`` is resumed.
        signature: the run specification (:func:`run_spec`, a dict: stored in ``last.pt`` so that a checkpoint of
            another run is reported with what changed) or its hash.
        options: :class:`TrainOptions`, or its fields as keywords (``log=..., precision=...``).

    Under ``torch.distributed`` (world size > 1) every rank calls this with the same network (the same seed;
    rank 0's weights are broadcast anyway), computes its micro-batches (``cfg.shards``, module doc) and the
    summed gradients; losses in ``history`` are the global means, equal on every rank and to a one-process run
    with the same ``shards``.  Only rank 0 logs and writes ``last.pt``; every rank evaluates ``eval_fn`` (the
    same EMA on the same data) so every rank returns the same selection.
    """
    o = make_options(TrainOptions, options, "train options", **kwargs)
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    with checkpoint_lock(ckpt_dir, enabled=world()[0] == 0):  # only rank 0 writes the directory
        return _train(net, loss_fn, data, cfg, ckpt_dir, signature, o)


def _train(net, loss_fn, data, cfg: TrainConfig, ckpt_dir: Path, signature, o: TrainOptions):
    """The body of :func:`train` (its lock held): the training procedure, step by step."""
    log, progress, eval_fn, precision = o.log, o.progress, o.eval_fn, o.precision
    rank, world_size = world()
    if precision != "fp32":
        eval_fn = _under(eval_fn, next(net.parameters()).device, precision)
    shards, my_shards = shard_plan(cfg, rank, world_size)
    if rank != 0:
        log, progress = (lambda _msg: None), False
    buckets = length_buckets(cfg, data, o.row_lengths)
    spec = signature if isinstance(signature, dict) else None
    signature = spec_signature(signature)
    last = ckpt_dir / "last.pt"
    st = start_state(net, cfg, o.params)
    if rank == 0:  # temporary files of writes that a killed process never finished (the lock is held)
        for stale in ckpt_dir.glob(f".{last.name}.*.tmp"):
            stale.unlink(missing_ok=True)
    restore(st, resume_state(last, signature, spec, log), last, shards, log)
    broadcast_state(net, st.ema)  # no-op in one process
    if st.step >= cfg.steps:
        return select_best(st, log)
    if eval_fn is not None and st.step == 0:
        evaluate_dev(st, eval_fn, log)
    net.train()
    bar = progress_bar(cfg, st.step) if progress else None
    t0 = time.time()
    while st.step < cfg.steps:
        idx = draw_batch(cfg, st.step, data.shape[0], buckets)
        gnorm = train_step(st, loss_fn, data, idx, cfg, shards, my_shards, o.collate, precision)
        if bar is not None:
            bar.update(1)
        if st.step % cfg.log_every == 0 or st.step == cfg.steps:
            log_progress(st, gnorm, cfg, t0, log)
        if st.step % cfg.ckpt_every == 0 or st.step == cfg.steps:
            if eval_fn is not None:
                evaluate_dev(st, eval_fn, log)
            save_checkpoint(last, st, signature, spec, shards)
        if o.stop_after is not None and st.step >= o.stop_after:
            save_checkpoint(last, st, signature, spec, shards)
            barrier()  # every rank returns once last.pt is written
            break
    if bar is not None:
        bar.close()
    net.eval()
    if o.stop_after is not None and st.step < cfg.steps:
        return st.ema, st.history
    return select_best(st, log)


def _under(eval_fn, device, precision):
    """``eval_fn`` run under :func:`~unie.core.precision.autocast` (None stays None)."""
    if eval_fn is None:
        return None

    def run(ema):
        with autocast(device, precision):
            return eval_fn(ema)

    return run


# ---- the parts of the procedure, in the order it uses them ----


@dataclasses.dataclass
class TrainState:
    """A run between two steps: the weights, the optimiser and the records that ``last.pt`` carries."""

    net: torch.nn.Module
    ema: torch.nn.Module  # the EMA of ``net``'s weights (no gradients): what training returns
    opt: torch.optim.Optimizer
    params: list  # the parameters ``opt`` updates
    step: int = 0  # steps done
    history: list = dataclasses.field(default_factory=list)  # log records and dev evaluations
    running: list = dataclasses.field(default_factory=list)  # the step losses since the last log record
    best: tuple | None = None  # (dev loss, EMA state) of the best admissible checkpoint (``eval_fn`` only)


def length_buckets(cfg: TrainConfig, data: torch.Tensor, row_lengths) -> tuple[tuple, torch.Tensor] | None:
    """``(buckets, bucket_of)`` when ``cfg.length_buckets > 1``: the row indices sorted by content length (stable)
    cut into ``length_buckets`` equal buckets, and each row's bucket; None for one bucket (uniform batches)."""
    if cfg.length_buckets <= 1:
        return None
    if row_lengths is None or len(row_lengths) != data.shape[0]:
        raise ValueError("length_buckets > 1 needs row_lengths, one per row of data")
    order = torch.sort(torch.as_tensor(row_lengths), stable=True).indices
    buckets = torch.tensor_split(order, cfg.length_buckets)
    bucket_of = torch.empty(data.shape[0], dtype=torch.long)
    for b, rows in enumerate(buckets):
        bucket_of[rows] = b
    return buckets, bucket_of


def start_state(net: torch.nn.Module, cfg: TrainConfig, params: list | None) -> TrainState:
    """Step 0: AdamW over ``params`` (default: all of ``net``) and the EMA, a frozen copy of ``net``."""
    params = list(net.parameters()) if params is None else list(params)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
    ema = copy.deepcopy(net).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    return TrainState(net, ema, opt, params)


def restore(st: TrainState, state: dict | None, last: Path, shards: int, log) -> None:
    """Load a resumable ``last.pt`` (``state``, from :func:`resume_state`; None: start from step 0) into ``st``:
    the weights, the EMA, the optimiser, the step, the history, the running losses and the best checkpoint."""
    if state is None:
        return
    st.net.load_state_dict(state["model"])
    st.ema.load_state_dict(state["ema"])
    st.opt.load_state_dict(state["opt"])
    st.step = int(state["step"])
    st.history = json.loads(state["history"])
    st.running = json.loads(state.get("running", "[]"))
    if "best_state" in state:
        st.best = (float(state["best_loss"]), state["best_state"])
    log(f"resumed from {last} at step {st.step}")
    if int(state.get("shards", 1)) != shards:
        log(
            f"note: {last} was trained with {int(state.get('shards', 1))} shard(s), this run uses {shards} "
            "(set train.shards to keep the trajectory independent of the number of processes)"
        )


def select_best(st: TrainState, log) -> tuple[torch.nn.Module, list[dict]]:
    """The end of a finished run: ``(ema, history)``, the EMA set to the best dev checkpoint's when there is one."""
    if st.best is not None:
        st.ema.load_state_dict(st.best[1])
        log(f"selected the checkpoint with the best dev loss {st.best[0]:.4f}")
    return st.ema, st.history


def evaluate_dev(st: TrainState, eval_fn, log) -> None:
    """Dev evaluation of the EMA at ``st.step`` (recorded in the history); keeps its weights as the best when it is
    admissible (its ``guard``, if any, not above the first evaluation's) and its loss the lowest so far."""
    dev = eval_fn(st.ema)
    initial = next((h["dev"] for h in st.history if "dev" in h), dev)
    dev["admissible"] = "guard" not in dev or dev["guard"] <= initial["guard"]
    st.history.append({"step": st.step, "dev": dev})
    log(json.dumps(st.history[-1]))
    if dev["admissible"] and (st.best is None or dev["loss"] < st.best[0]):
        st.best = (dev["loss"], {k: v.detach().clone() for k, v in st.ema.state_dict().items()})


def progress_bar(cfg: TrainConfig, step: int):
    """A tqdm bar over the run's steps, starting at ``step`` (a resumed run), refreshed at most every 5 s."""
    from tqdm import tqdm

    return tqdm(total=cfg.steps, initial=step, desc="train", mininterval=5.0, dynamic_ncols=False, ncols=100)


def draw_batch(cfg: TrainConfig, step: int, n_rows: int, buckets) -> torch.Tensor:
    """The ``cfg.batch_size`` row indices of step ``step``'s global batch, from stream 0 of ``(seed, step)``:
    uniform over the ``n_rows`` rows, or with length ``buckets`` (:func:`length_buckets`) all from one bucket,
    chosen with probability proportional to its size (the bucket of one uniform row), uniform within it."""
    gb = _step_generator(cfg.seed, step, 0, "cpu")
    if buckets is None:
        return torch.randint(0, n_rows, (cfg.batch_size,), generator=gb)
    buckets, bucket_of = buckets
    rows = buckets[int(bucket_of[torch.randint(0, n_rows, (1,), generator=gb)])]
    return rows[torch.randint(0, len(rows), (cfg.batch_size,), generator=gb)]


def train_step(
    st: TrainState,
    loss_fn,
    data,
    idx: torch.Tensor,
    cfg: TrainConfig,
    shards: int,
    my_shards,
    collate,
    precision: str = "fp32",
) -> torch.Tensor:
    """One optimisation step on the global batch ``data[idx]``: the learning rate of ``st.step``, the gradients of
    this rank's micro-batches summed over ranks, clipping, AdamW, the EMA; ``st.step`` advances and the step's
    mean loss joins ``st.running``.  Returns the gradient norm before clipping."""
    for group in st.opt.param_groups:
        group["lr"] = lr_at(st.step, cfg)
    st.opt.zero_grad(set_to_none=True)
    losses = micro_batch_losses(st, loss_fn, data, idx, cfg, shards, my_shards, collate, precision)
    all_reduce_gradients(st.params)  # the sum over ranks = the mean over all micro-batches (module doc)
    gnorm = torch.nn.utils.clip_grad_norm_(st.params, cfg.grad_clip)
    st.opt.step()
    update_ema(st.ema, st.net, st.step, cfg.ema)
    st.step += 1
    st.running.append(losses[0] if shards == 1 else sum(losses) / shards)
    return gnorm


def micro_batch_losses(
    st: TrainState,
    loss_fn,
    data,
    idx: torch.Tensor,
    cfg: TrainConfig,
    shards: int,
    my_shards,
    collate,
    precision: str = "fp32",
) -> list[float]:
    """Forward and backward of this rank's micro-batches of the global batch ``idx`` (micro-batch ``s``: rows
    ``s * micro:(s + 1) * micro``, loss stream ``1 + s``, dropout seed :func:`_dropout_seed`); returns the loss of
    every micro-batch (all ranks'), each finite, else :class:`NonFiniteLossError` before anything is written.
    The forward pass and the loss run in ``precision`` (the loss itself float32), the backward pass outside
    autocast."""
    device = next(st.net.parameters()).device
    set_step = getattr(getattr(loss_fn, "__self__", None), "set_step", None)
    micro = cfg.batch_size // shards
    shard_loss = torch.zeros(shards, dtype=torch.float64, device=device)  # this rank's entries, then all
    for s in my_shards:
        torch.manual_seed(_dropout_seed(cfg.seed, st.step, s))  # dropout, if any
        part = idx[s * micro : (s + 1) * micro]
        x0 = data[part] if collate is None else collate(data[part])
        x0 = x0.to(device)
        gl = _step_generator(cfg.seed, st.step, 1 + s, device)
        if set_step is not None:  # step-dependent losses (Duo's curriculum) stay right after a resume
            set_step(st.step)
        with autocast(device, precision):
            loss = widen(loss_fn(st.net, x0, gl))  # float32 (a bfloat16 loss is widened)
        (loss if shards == 1 else loss / shards).backward()
        shard_loss[s] = loss.detach().double()
    all_reduce_sum(shard_loss)  # every rank sees every shard's loss (the others' entries are zero)
    losses = shard_loss.tolist()
    bad = [s for s, v in enumerate(losses) if not math.isfinite(v)]
    if bad:
        where = "" if shards == 1 else f" (micro-batch {bad[0]} of {shards})"
        raise NonFiniteLossError(
            f"non-finite loss ({losses[bad[0]]}) at step {st.step}{where}; stopping before writing outputs"
        )
    return losses


@torch.no_grad()
def update_ema(ema: torch.nn.Module, net: torch.nn.Module, step: int, decay: float) -> None:
    """``ema <- d * ema + (1 - d) * net`` after step ``step`` with ``d = min(decay, (1 + step) / (10 + step))`` (a
    warm-up, so that short runs are not dominated by the initial weights); buffers are copied."""
    d = min(decay, (1 + step) / (10 + step))
    for pe, p in zip(ema.parameters(), net.parameters()):
        pe.lerp_(p.detach(), 1 - d)
    for be, b in zip(ema.buffers(), net.buffers()):
        be.copy_(b)


def log_progress(st: TrainState, gnorm: torch.Tensor, cfg: TrainConfig, t0: float, log) -> None:
    """The log record of the steps since the last one (their mean loss), appended to the history."""
    rec = {
        "step": st.step,
        "loss": sum(st.running) / len(st.running),
        "grad_norm": float(gnorm),
        "lr": lr_at(st.step - 1, cfg),
        "elapsed_s": round(time.time() - t0, 2),
    }
    st.history.append(rec)
    st.running = []
    log(json.dumps(rec))


def save_checkpoint(last: Path, st: TrainState, signature: str, spec: dict | None, shards: int) -> None:
    """Write ``last.pt`` atomically (a failed write keeps the previous one), on rank 0 only: the weights, the EMA,
    the optimiser, the step, the run specification (its hash, and the spec itself when known), the history, the
    running losses, the shard count and the best dev checkpoint."""
    if world()[0] != 0:
        return
    state = {
        "model": st.net.state_dict(),
        "ema": st.ema.state_dict(),
        "opt": st.opt.state_dict(),
        "step": st.step,
        "signature": signature,
        "history": json.dumps(st.history),
        "running": json.dumps(st.running),
        "shards": shards,
    }
    if spec is not None:
        state["spec"] = json.dumps(spec, sort_keys=True)
    if st.best is not None:
        state["best_loss"], state["best_state"] = torch.tensor(st.best[0]), st.best[1]
    atomic_write(last, lambda tmp: torch.save(state, tmp))
