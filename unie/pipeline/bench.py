"""Rule ``bench``: the sampler benchmark, every number measured side by side in one process.

* ``C_DLM``: one denoiser pass over ``B`` sequences; ``C_AR``: one proxy pass over ``B`` rows; ``P``: the proxy
  rows an energy needs per sequence (``K`` teacher-forced, ``K + 1`` masked context: the candidates against
  their own ``xs`` plus one pass on ``xt``).
* **Window step**: Algorithm 2 with ``w = 1`` (every step in the window) over plain MDLM (``K = 1``), the same
  steps, batch and seeds; analytic limit ``1 + P·C_AR/C_DLM``.  Every row revealing something at every step
  is the limit's assumption (Algorithm 2 skips rows where a step reveals nothing): the share of rows scored
  is reported, and the limit with it, ``1 + f·P·C_AR/C_DLM``.
* **Whole run** at the configured ``w``: over plain MDLM; analytic ``1 + w·P·C_AR/C_DLM``.
* **Uni-E vs AR at equal Gen PPL**: the AR (KV cache, always ``L`` steps) and Uni-E at each step count of
  Figure 3; the Gen PPL of each comes from the workflow's result JSONs; the ratio is Uni-E's wall-clock at the
  fewest steps whose Gen PPL is at most the AR's, over the AR's (None when never reached).
* **Training throughput** of the backbone: tokens/s of the training step (loss, backward, AdamW).
* **Token file** (:func:`data_path_throughput`): training steps/s with batches drawn as training draws them from
  the Parquet token file's zero-copy Arrow view (what training reads) and from the memory-mapped int32 ``.npy``
  array training read before (the same bytes mapped by numpy), in interleaved rounds; the same model and batch.
* **Paper scale** (:func:`paper_scale_bench`, no checkpoint, no download): random weights of GPT-2-small's sizes,
  every number of the paper-scale table in ``docs/gpu-runs.md``, in fp32 / TF32 / bf16 autocast
  (:func:`precision_mode`), with the ratios to their limits and the AR's per-token latency;
  ``python -m unie.pipeline.bench --paper-scale --device cuda --out DIR`` runs it with torch alone (this module
  imports no workflow package).

Timing protocol (:mod:`unie.eval.timing`): models loaded first, warm-up untimed, one batch, median of repeats.
The window-step and whole-run ratios and their limits are measured in interleaved rounds (each round times
``C_DLM``, ``C_AR``, the plain, the ``w = 1`` and the ``w`` generation once, back to back) and reported as the
median over rounds of each round's ratio, so that a drift of the machine's speed during the bench (a shared
virtual CPU: ±30 % between minutes measured here) moves a ratio and its limit together.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core.options import TrainConfig
from ..core.registry import SAMPLERS
from ..core.train import draw_batch
from ..data.tokens import TOKEN_DTYPE, TokenRows, load_tokens, map_view, read_token_meta, token_view, view_path
from ..data.tokenizer import load_tokenizer
from ..eval.timing import _sync, time_generation
from ..models.checkpoint import load_model
from .model_files import build_method, load_wrapped
from .timing_runs import cpu_name


def _median_time(fn, repeats: int, warmup: int, device) -> float:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


@torch.no_grad()
def pass_costs(
    dlm, proxy, x0: torch.Tensor, mask_id: int, repeats: int, device, warmup: int = 2
) -> tuple[float, float]:
    """``(C_DLM, C_AR)``: seconds of one denoiser pass over ``x0``'s ``B`` rows half masked, and of one proxy
    pass (``token_logp`` against one context per row) over the same ``B`` rows (medians of ``repeats``)."""
    g = torch.Generator().manual_seed(0)
    xt = torch.where(torch.rand(x0.shape, generator=g) < 0.5, torch.full_like(x0, mask_id), x0).to(device)
    c_dlm = _median_time(lambda: dlm.logp_x0(xt), repeats, warmup, device)
    c_ar = _median_time(lambda: proxy.token_logp(xt, x0.to(device)[:, None]), repeats, warmup, device)
    return c_dlm, c_ar


def train_throughput(model_dir, tokenizer, rows: torch.Tensor, steps: int, device) -> float:
    """Tokens/s of ``steps`` training steps (loss, backward, AdamW) of the checkpoint's method on ``rows``."""
    net, meta = load_model(model_dir, device=device, tokenizer_info=tokenizer.info())
    method = build_method(meta["method"], tokenizer.info(), meta.get("extra", {}).get("options", {}))
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(0)
    x0 = rows.to(device)

    def step():
        loss = method.loss(net, x0, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # warm-up
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * x0.numel() / (time.perf_counter() - t0)


def data_path_throughput(
    model_dir, tokenizer, train_path, token_cache, batch: int, steps: int, rounds: int, device, seed: int = 0
) -> dict:
    """Training steps/s of the checkpoint's method on the token file ``train_path`` read two ways:

    * ``parquet``: :meth:`TokenRows.open` (the zero-copy Arrow view in ``token_cache``, built if missing), as
      training reads it now;
    * ``npy``: the same int32 values memory-mapped by numpy as the ``.npy`` was (``np.load(mmap_mode="c")`` is a
      copy-on-write ``np.memmap`` at the header's end; here at the view's values) and indexed as a tensor.

    A step draws its batch as training does (:func:`unie.core.train.draw_batch`: ``seed``, step, ``batch`` rows),
    reads it, and runs loss, backward and AdamW on a model of its own (two copies of the checkpoint).  The two
    alternate step by step (which one first alternating too), so that a drift of the machine's speed falls on both:
    the ratio is the median over the ``rounds * steps`` pairs of adjacent steps of the ``.npy`` step's seconds over
    the Parquet one's (> 1: Parquet faster; a median resists the bursts of a shared machine), and steps/s are all the
    steps over all their seconds (and per round).  The reading alone is timed too (microseconds per batch, medians
    of 5 passes over the same draws).  Also: whether every batch was identical, the seconds of the first open
    (building the view if it was missing) and the bytes of the Parquet file and of the view."""
    t0 = time.perf_counter()
    meta = read_token_meta(train_path)
    view = view_path(train_path, meta, token_cache)
    built = not view.exists()
    x = token_view(train_path, token_cache)
    open_s = time.perf_counter() - t0
    npy = np.memmap(view, dtype=TOKEN_DTYPE, mode="c", offset=map_view(view)[2], shape=x.shape)
    sources = {"parquet": TokenRows(x), "npy": TokenRows(torch.from_numpy(npy))}  # what np.load(mmap_mode="c") gave
    cfg = TrainConfig(steps=steps, batch_size=batch, seed=seed)
    n = x.shape[0]
    models = {}
    for name in sources:
        net, saved = load_model(model_dir, device=device, tokenizer_info=tokenizer.info())
        method = build_method(saved["method"], tokenizer.info(), saved.get("extra", {}).get("options", {}))
        net.train()
        models[name] = (
            net,
            method,
            torch.optim.AdamW(net.parameters(), lr=1e-4),
            torch.Generator(device=device).manual_seed(seed),
        )

    def step(name, k) -> float:
        net, method, opt, g = models[name]
        _sync(device)
        t = time.perf_counter()
        x0 = sources[name][draw_batch(cfg, k, n, None)]
        loss = method.loss(net, x0.to(device), g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(device)
        return time.perf_counter() - t

    for k in range(2):  # warm-up, untimed
        for name in sources:
            step(name, k)
    per, seconds, pairs = {name: [] for name in sources}, {name: [] for name in sources}, []
    for r in range(rounds):
        for k in range(steps):
            t = {name: step(name, 2 + r * steps + k) for name in (sources if k % 2 == 0 else reversed(sources))}
            pairs.append(t["npy"] / t["parquet"])
            for name in sources:
                seconds[name].append(t[name])
        for name in sources:
            per[name].append(steps / sum(seconds[name][-steps:]))
    draws = [draw_batch(cfg, k, n, None) for k in range(2 + rounds * steps)]
    same = all(torch.equal(sources["parquet"][idx], sources["npy"][idx]) for idx in draws)
    read_us = {name: statistics.median(_read_pass(src, draws) for _ in range(5)) for name, src in sources.items()}
    med = statistics.median
    return {
        "steps_per_s": {name: len(v) / sum(v) for name, v in seconds.items()},
        "ratio": med(pairs),
        "rounds": rounds,
        "steps": steps,
        "batch_size": batch,
        "identical_batches": same,
        "read_us_per_batch": read_us,
        "open_s": open_s,
        "view_built": built,
        "parquet_bytes": Path(train_path).stat().st_size,
        "view_bytes": view.stat().st_size,
        "rows": n,
        "per_round": per,
    }


def _read_pass(rows, draws) -> float:
    """Microseconds per batch of reading ``rows[idx]`` for every ``idx`` of ``draws``."""
    t = time.perf_counter()
    for idx in draws:
        rows[idx]
    return (time.perf_counter() - t) / len(draws) * 1e6


def run_bench(
    cfg: dict,
    inputs: dict,
    genppl: list[dict],
    *,
    seq_len: int,
    threads: int,
    evaluator: str,
    device: str = "cpu",
    log=print,
    token_cache=None,
) -> dict:
    """The whole benchmark (module doc).  ``cfg``: config ``bench``; ``inputs``: ``tokenizer``, ``train`` (a Parquet
    token file) and ``dlm``/``proxy``/``ar`` checkpoint directories; ``genppl``: Figure 3's trade-off records (Uni-E
    and AR); ``token_cache``: where the token file's Arrow view is kept (:func:`unie.data.tokens.token_view`)."""
    torch.set_num_threads(threads)
    tok = load_tokenizer(inputs["tokenizer"])
    dlm = load_wrapped(inputs["dlm"], tok, device)
    proxy = load_wrapped(inputs["proxy"], tok, device)
    ar = load_wrapped(inputs["ar"], tok, device)
    B, K, w, L = cfg["batch_size"], cfg["K"], cfg["w"], seq_len
    rows = load_tokens(inputs["train"], B).long()
    P = K + 1 if cfg["ar_context"] == "masked" else K
    energy = SAMPLERS["energy"]

    def opts(k, win):
        return energy.options({"energy": cfg["energy"], "K": k, "w": win, "ar_context": cfg["ar_context"]})

    models = {"dlm": dlm, "proxy": proxy}
    kw = dict(batch_size=B, warmup=1, repeats=cfg["repeats"], seed=0, device=device)
    S = cfg["steps"]
    runs = {"plain": opts(1, 0.0), "full": opts(K, 1.0), "part": opts(K, w)}
    for o in runs.values():  # warm-up, untimed
        time_generation(energy, models, o, L, S, **{**kw, "warmup": 1, "repeats": 1})
    rounds = []  # each round: C_DLM, C_AR and one generation of each run, back to back
    for r in range(cfg["repeats"]):
        c = pass_costs(dlm, proxy, rows, dlm.mask_id, 5, device, warmup=0)
        t = {
            name: time_generation(energy, models, o, L, S, **{**kw, "warmup": 0, "repeats": 1, "seed": 1 + r})[
                "seconds"
            ]
            for name, o in runs.items()
        }
        rounds.append({"C_DLM_s": c[0], "C_AR_s": c[1], **{f"seconds_{k}": v for k, v in t.items()}})
    med = statistics.median
    c_dlm, c_ar = med([x["C_DLM_s"] for x in rounds]), med([x["C_AR_s"] for x in rounds])
    log(f"C_DLM {c_dlm * 1e3:.2f} ms, C_AR {c_ar * 1e3:.2f} ms per {B} rows (medians of {len(rounds)} rounds); P = {P}")
    _, stats = energy(
        models, B, L, S, torch.Generator(device=device).manual_seed(0), opts(K, 1.0), batch_size=B, device=device
    )
    f = stats["energy_rows"] / max(1, B * stats["window_steps"])  # share of rows scored per window step
    _, stats_w = energy(
        models, B, L, S, torch.Generator(device=device).manual_seed(0), opts(K, w), batch_size=B, device=device
    )
    frac = stats_w["window_steps"] / S  # the steps with t in (1 - w, 1]: w up to the grid's rounding
    ratios = [P * x["C_AR_s"] / x["C_DLM_s"] for x in rounds]  # P·C_AR/C_DLM of each round
    full = [x["seconds_full"] / x["seconds_plain"] for x in rounds]
    part = [x["seconds_part"] / x["seconds_plain"] for x in rounds]
    seconds = {name: med([x[f"seconds_{name}"] for x in rounds]) for name in runs}  # median seconds per batch
    out = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if str(device).startswith("cuda") else cpu_name(),
        "threads": threads,
        "torch": torch.__version__,
        "batch_size": B,
        "seq_len": L,
        "K": K,
        "w": w,
        "energy": cfg["energy"],
        "ar_context": cfg["ar_context"],
        "steps": S,
        "P": P,
        "C_DLM_s": c_dlm,
        "C_AR_s": c_ar,
        "rounds": rounds,
        "window_step": {
            "measured": med(full),
            "limit": med([1 + q for q in ratios]),
            "rows_scored": f,
            "limit_rows_scored": med([1 + f * q for q in ratios]),
            "measured_to_limit": med([m / (1 + q) for m, q in zip(full, ratios)]),
            "seconds_plain": seconds["plain"],
            "seconds_energy": seconds["full"],
        },
        "whole_run": {
            "measured": med(part),
            "limit": med([1 + w * q for q in ratios]),
            "window_fraction": frac,
            "limit_window_fraction": med([1 + frac * f * q for q in ratios]),
            "seconds_plain": seconds["plain"],
            "seconds_energy": seconds["part"],
        },
    }
    ws = out["window_step"]
    ws["within_1.1"] = ws["measured_to_limit"] <= 1.1
    log(
        f"window step {ws['measured']:.3f} (limit {ws['limit']:.3f}; with {f:.2f} of rows scored "
        f"{ws['limit_rows_scored']:.3f}); whole run at w={w}: {out['whole_run']['measured']:.3f} "
        f"(limit {out['whole_run']['limit']:.3f})"
    )
    # Uni-E vs the AR at equal Gen PPL (the paper's 10.5 s / 13.5 s = 0.78)
    ppl = {(r["sampling"]["run"], int(r["sampling"]["steps"])): r["genppl"][evaluator]["ppl"] for r in genppl}
    ar_ppl = ppl[(cfg["ar_run"], L)]
    ar_t = time_generation(SAMPLERS["ar"], {"ar": ar}, SAMPLERS["ar"].options({}), L, L, **kw)["seconds"]
    uni = []
    for s in sorted(s for (run, s) in ppl if run == cfg["uni_run"]):
        t = time_generation(energy, models, opts(K, w), L, s, **kw)["seconds"]
        uni.append({"steps": s, "seconds": t, "genppl": ppl[(cfg["uni_run"], s)]})
    hit = [u for u in uni if u["genppl"] <= ar_ppl]
    out["equal_quality"] = {
        "evaluator": evaluator,
        "ar_genppl": ar_ppl,
        "ar_seconds": ar_t,
        "uni": uni,
        "steps": hit[0]["steps"] if hit else None,
        "ratio_to_ar": hit[0]["seconds"] / ar_t if hit else None,
        "paper_ratio": 10.5 / 13.5,
    }
    log(
        f"AR {ar_t:.3f} s at Gen PPL {ar_ppl:.2f}; Uni-E "
        + ", ".join(f"{u['steps']} steps {u['seconds']:.3f} s Gen PPL {u['genppl']:.2f}" for u in uni)
    )
    tps = train_throughput(
        inputs["dlm"], tok, load_tokens(inputs["train"], cfg["train_batch"]).long(), cfg["train_steps"], device
    )
    out["train_tokens_per_s"] = tps
    log(f"training throughput of {inputs['dlm']}: {tps:.0f} tokens/s")
    d = data_path_throughput(
        inputs["dlm"], tok, inputs["train"], token_cache, cfg["train_batch"], cfg["train_steps"], cfg["repeats"], device
    )
    out["token_file"] = d
    log(
        f"training from the Parquet token file's view {d['steps_per_s']['parquet']:.2f} steps/s, from the "
        f"memory-mapped .npy {d['steps_per_s']['npy']:.2f} steps/s (ratio {d['ratio']:.3f}, median over "
        f"{d['rounds'] * d['steps']} pairs of steps; identical batches: {d['identical_batches']}); first open {d['open_s']:.2f} s "
        f"({'built the view' if d['view_built'] else 'view cached'})"
    )
    return out


def bench_markdown(r: dict) -> str:
    """The bench as a short Markdown report (every number from :func:`run_bench`'s record)."""
    ws, wr, eq = r["window_step"], r["whole_run"], r["equal_quality"]
    lines = [
        f"# Sampler benchmark ({r['device_name']}, {r['threads']} thread(s), torch {r['torch']})",
        "",
        f"B = {r['batch_size']}, L = {r['seq_len']}, {r['energy']} energy, ar_context {r['ar_context']}, "
        f"K = {r['K']}, P = {r['P']} proxy rows per sequence, {r['steps']} steps.",
        "",
        "| quantity | measured | analytic limit |",
        "|---|---|---|",
        f"| C_DLM (one denoiser pass, B rows; medians over rounds) | {r['C_DLM_s'] * 1e3:.2f} ms | |",
        f"| C_AR (one proxy pass, B rows) | {r['C_AR_s'] * 1e3:.2f} ms | |",
        f"| window step / MDLM step (w = 1) | {ws['measured']:.3f} | 1 + P·C_AR/C_DLM = {ws['limit']:.3f} |",
        f"| same, limit with the rows actually scored ({ws['rows_scored']:.2f}) | | {ws['limit_rows_scored']:.3f} |",
        f"| whole run / MDLM (w = {r['w']}) | {wr['measured']:.3f} | 1 + w·P·C_AR/C_DLM = {wr['limit']:.3f} |",
        f"| same, limit with the steps actually in the window ({wr['window_fraction']:.3f} of {r['steps']}) and "
        f"the rows scored | | {wr['limit_window_fraction']:.3f} |",
        f"| training throughput (backbone) | {r['train_tokens_per_s']:.0f} tokens/s | |",
        "",
        *_token_file_lines(r.get("token_file")),
        f"Window step / its limit (median over {len(r['rounds'])} interleaved rounds of each round's ratio): "
        f"{ws['measured_to_limit']:.3f}; within 1.1 x its limit: **{'yes' if ws['within_1.1'] else 'no'}**.",
        "",
        f"Uni-E vs AR at equal Gen PPL ({eq['evaluator']}): AR {eq['ar_seconds']:.3f} s per batch at Gen PPL "
        f"{eq['ar_genppl']:.2f}.",
        "",
        "| Uni-E steps | seconds per batch | Gen PPL |",
        "|---|---|---|",
        *[f"| {u['steps']} | {u['seconds']:.3f} | {u['genppl']:.2f} |" for u in eq["uni"]],
        "",
        (
            f"Uni-E first reaches the AR's Gen PPL at {eq['steps']} steps: wall-clock ratio "
            f"{eq['ratio_to_ar']:.2f} (the paper: {eq['paper_ratio']:.2f})."
            if eq["steps"] is not None
            else f"Uni-E never reaches the AR's Gen PPL at these step counts: no equal-quality ratio (the paper: "
            f"{eq['paper_ratio']:.2f})."
        ),
    ]
    return "\n".join(lines) + "\n"


def _token_file_lines(d: dict | None) -> list[str]:
    if d is None:
        return []
    sps = d["steps_per_s"]
    return [
        f"Training from the token file ({d['rows']} rows; batch {d['batch_size']}, {d['steps']} steps of each per "
        f"round, {d['rounds']} rounds, the same model):",
        "",
        "| tokens read from | steps/s (all steps) |",
        "|---|---|",
        f"| Parquet, zero-copy Arrow view (training now) | {sps['parquet']:.2f} |",
        f"| memory-mapped int32 `.npy` array (before) | {sps['npy']:.2f} |",
        "",
        f"Parquet / `.npy`: **{d['ratio']:.3f}** (median over the pairs of adjacent steps; the two alternate step by "
        "step); "
        f"identical batches: **{'yes' if d['identical_batches'] else 'no'}**.  Reading a batch alone: "
        f"{d['read_us_per_batch']['parquet']:.1f} µs from the view, {d['read_us_per_batch']['npy']:.1f} µs from the "
        f"`.npy` map.  Parquet file {d['parquet_bytes'] / 1e6:.2f} MB, its view "
        f"{d['view_bytes'] / 1e6:.2f} MB; first open {d['open_s']:.2f} s "
        f"({'view built' if d['view_built'] else 'view cached, values hashed'}).",
        "",
    ]


# ---------------------------------------------------------------------- paper scale, random weights
PRECISIONS = ("fp32", "tf32", "bf16")


@dataclass(frozen=True)
class PaperScale:
    """The paper-scale bench (:func:`paper_scale_bench`): GPT-2-small sizes with random weights (a pass costs the
    same whatever the weights), ``batch_size`` sequences of ``seq_len`` tokens, Uni-E with ``K`` candidates,
    window ``w`` and the mask-aware proxy (``ar_context: masked``, ``P = K + 1``), the MDLM/Uni-E runs at each of
    ``steps``, Algorithm 2's window step at ``window_steps`` (``w = 1`` over plain MDLM; ``None``: the fewest
    ``steps``, whose MDLM run is then the plain reference), ``train_steps`` timed training steps, medians of
    ``repeats`` generations.  ``skip``: ``(precision, steps)`` pairs not run (e.g. fp32 at 256 steps)."""

    vocab_size: int = 50258
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    seq_len: int = 1024
    batch_size: int = 8
    K: int = 2
    w: float = 0.2
    energy: str = "uni"
    ar_context: str = "masked"
    steps: tuple[int, ...] = (128, 256)
    window_steps: int | None = None
    train_steps: int = 5
    repeats: int = 1
    compare_gumbel: tuple[str, ...] = ("bf16",)  # precisions that also time the window step with float64
    # Gumbel-max candidates (the draw of every CPU run; on a GPU the old one), CUDA only
    skip: tuple[tuple[str, int], ...] = ()


@contextmanager
def precision_mode(precision: str, device):
    """``fp32``: full float32 matmuls; ``tf32``: TF32 matmuls and convolutions on CUDA
    (``torch.backends.cuda.matmul.allow_tf32``); ``bf16``: ``torch.autocast(dtype=bfloat16)`` (log-softmax and the
    samplers' decisions stay in float32/float64: every ``normalise``/``subs_logp`` calls ``.float()`` first)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _timed(fn, device) -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def _peak_reset(device):
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(device):
    return torch.cuda.max_memory_allocated() / 1e9 if str(device).startswith("cuda") else None


def paper_scale_bench(
    device="cuda", size: PaperScale | None = None, precisions=PRECISIONS, *, log=print, on_precision=None
) -> dict:
    """Every number of the paper-scale table (``docs/gpu-runs.md``) for each of ``precisions`` (``fp32``,
    ``tf32``, ``bf16``), one process, random weights of ``size`` (:class:`PaperScale`; nothing is downloaded).
    ``on_precision(result)`` is called after each precision (write partial results).  Returns the record
    :func:`paper_scale_markdown` prints."""
    import copy

    from ..core.options import ModelConfig
    from ..energy.sampler import sample_energy
    from ..methods.ar import ARModel
    from ..methods.mdlm import MDLM, MDLMDenoiser, sample_mdlm
    from ..models.transformer import Transformer

    s = size or PaperScale()
    dev = torch.device(device)
    V, B, L, K = s.vocab_size, s.batch_size, s.seq_len, s.K
    mask_id, bos_id = V - 1, V - 2
    info = {"mask_id": mask_id, "bos_id": bos_id, "eos_id": bos_id}
    torch.manual_seed(0)

    def net(causal):
        cfg = ModelConfig(
            vocab_size=V, d_model=s.d_model, n_layers=s.n_layers, n_heads=s.n_heads, max_len=L, causal=causal
        )
        return Transformer(cfg).to(dev).eval()

    dlm_net, ar_net = net(False), net(True)
    dlm = MDLMDenoiser(dlm_net, mask_id, (bos_id,))
    ar = ARModel(ar_net, bos_id, mask_id, eos_id=bos_id)  # the proxy and the AR baseline (same size)
    P = K + 1 if s.ar_context == "masked" else K
    rows = torch.randint(0, V - 2, (B, L), generator=torch.Generator().manual_seed(0))
    eopts = {"energy": s.energy, "ar_context": s.ar_context}
    win_steps = s.window_steps or min(s.steps)
    result = {
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "size": dataclasses.asdict(s),
        "P": P,
        "window_steps": win_steps,
        "precisions": {},
    }

    def gen(seed):
        return torch.Generator(device=dev).manual_seed(seed)

    def mdlm_run(steps, seed):
        return sample_mdlm(dlm, B, L, steps, gen(seed), batch_size=B, device=dev)

    def energy_run(steps, seed, k, w, draw="auto"):
        return sample_energy(
            dlm, ar, B, L, steps, gen(seed), {**eopts, "K": k, "w": w}, batch_size=B, device=dev, draw=draw
        )

    def med_time(fn):
        out = [_timed(fn, dev) for _ in range(s.repeats)]
        return statistics.median(t for t, _ in out), out[-1][1]

    for prec in precisions:
        r = {}
        _peak_reset(dev)
        with precision_mode(prec, dev):
            mdlm_run(2, 0), energy_run(2, 0, K, 1.0), ar.sample(B, 8, gen(0))  # warm-up (kernels, allocator)
            c_dlm, c_ar = pass_costs(dlm, ar, rows, mask_id, max(3, s.repeats), dev, warmup=1)
            r.update(C_DLM_s=c_dlm, C_AR_s=c_ar)
            log(f"[{prec}] C_DLM {c_dlm * 1e3:.1f} ms, C_AR {c_ar * 1e3:.1f} ms")
            # Algorithm 2's window step: w = 1 over plain MDLM (K = 1 is the plain sampler, bit for bit)
            t_plain, _ = med_time(lambda: mdlm_run(win_steps, 1))
            t_full, (_, st) = med_time(lambda: energy_run(win_steps, 1, K, 1.0))
            limit = 1 + P * c_ar / c_dlm
            f = st["energy_rows"] / max(1, B * st["window_steps"])
            ws = {
                "steps": win_steps,
                "seconds_plain": t_plain,
                "seconds_energy": t_full,
                "measured": t_full / t_plain,
                "limit": limit,
                "rows_scored": f,
                "draw": "inverse_cdf" if dev.type == "cuda" else "gumbel",
            }
            ws["measured_to_limit"] = ws["measured"] / limit
            if prec in s.compare_gumbel and dev.type == "cuda":
                t_g, _ = med_time(lambda: energy_run(win_steps, 1, K, 1.0, draw="gumbel"))
                ws.update(
                    seconds_energy_gumbel=t_g,
                    measured_gumbel=t_g / t_plain,
                    measured_to_limit_gumbel=t_g / t_plain / limit,
                )
            r["window_step"] = ws
            log(
                f"[{prec}] window step {ws['measured']:.3f} / limit {limit:.3f} = {ws['measured_to_limit']:.3f}"
                + (
                    f" (float64 Gumbel candidates: {ws['measured_to_limit_gumbel']:.3f})"
                    if "measured_gumbel" in ws
                    else ""
                )
            )
            # the AR baseline: KV cache, L tokens (CUDA graphs on a GPU), per-token latency
            t_ar, _ = med_time(lambda: ar.sample(B, L, gen(2)))
            r["ar"] = {
                "seconds": t_ar,
                "ms_per_token": t_ar / L * 1e3,
                "decode_path": ar.decode_path,
                "capture_seconds": ar.capture_seconds,
            }
            if prec == "bf16":  # what a user runs in bf16: the weights cast once (no autocast)
                ar16 = ARModel(copy.deepcopy(ar_net).to(torch.bfloat16), bos_id, mask_id, eos_id=bos_id)
                with torch.autocast(dev.type, enabled=False):
                    ar16.sample(B, 8, gen(0))
                    t16, _ = med_time(lambda: ar16.sample(B, L, gen(2)))
                r["ar_bf16_weights"] = {
                    "seconds": t16,
                    "ms_per_token": t16 / L * 1e3,
                    "decode_path": ar16.decode_path,
                    "capture_seconds": ar16.capture_seconds,
                }
                del ar16
            log(
                f"[{prec}] AR {t_ar:.2f} s for {L} tokens ({r['ar']['ms_per_token']:.2f} ms/token, "
                f"{r['ar']['decode_path']})"
                + (f"; bf16 weights {r['ar_bf16_weights']['seconds']:.2f} s" if "ar_bf16_weights" in r else "")
            )
        # training throughput: MDLM loss (under the precision) + backward + AdamW, on a copy of the denoiser
        train_net = copy.deepcopy(dlm_net).train()
        method, opt = MDLM(info), torch.optim.AdamW(train_net.parameters(), lr=1e-4)
        g, x0 = gen(3), rows.to(dev)

        def train_step():
            with precision_mode(prec, dev):
                loss = method.loss(train_net, x0, g)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        train_step()
        t_train, _ = _timed(lambda: [train_step() for _ in range(s.train_steps)], dev)
        r["train_tokens_per_s"] = s.train_steps * B * L / t_train
        train_net = opt = None  # free them before the sampling runs
        log(f"[{prec}] MDLM training {r['train_tokens_per_s']:.0f} tokens/s")
        r["runs"] = []
        with precision_mode(prec, dev):
            for S in s.steps:
                if (prec, S) in {tuple(x) for x in s.skip}:
                    continue
                t_m, _ = (t_plain, None) if S == win_steps else med_time(lambda: mdlm_run(S, 4))
                t_u, (_, st) = med_time(lambda: energy_run(S, 4, K, s.w))
                frac = st["window_steps"] / S
                run = {
                    "steps": S,
                    "seconds_mdlm": t_m,
                    "seconds_uni": t_u,
                    "ratio": t_u / t_m,
                    "limit": 1 + s.w * P * c_ar / c_dlm,
                    "limit_window_fraction": 1 + frac * P * c_ar / c_dlm,
                }
                run["ratio_to_limit"] = run["ratio"] / run["limit_window_fraction"]
                r["runs"].append(run)
                log(
                    f"[{prec}] {S} steps: MDLM {t_m:.2f} s, Uni-E {t_u:.2f} s (ratio {run['ratio']:.3f}, limit "
                    f"{run['limit_window_fraction']:.3f})"
                )
        r["peak_gpu_gb"] = _peak_gb(dev)
        result["precisions"][prec] = r
        if on_precision is not None:
            on_precision(result)
    return result


def paper_scale_markdown(res: dict) -> str:
    """:func:`paper_scale_bench`'s record as the paper-scale table (``docs/gpu-runs.md``) plus the ratios to their
    limits."""
    s, precs = res["size"], list(res["precisions"])
    R = res["precisions"]
    head = "| quantity | " + " | ".join(precs) + " |"
    sep = "|---" * (len(precs) + 1) + "|"

    def row(name, fn):
        cells = []
        for p in precs:
            try:
                cells.append(fn(R[p]))
            except (KeyError, IndexError, TypeError, StopIteration):
                cells.append("")
        return f"| {name} | " + " | ".join(cells) + " |"

    def run_of(r, S):
        return next(x for x in r["runs"] if x["steps"] == S)

    steps = s["steps"]
    lines = [
        f"# Paper-scale bench ({res['device_name']}, torch {res['torch']})",
        "",
        f"Random weights: d {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, L {s['seq_len']}, "
        f"V {s['vocab_size']}, batch {s['batch_size']}; Uni-E {s['energy']} energy, ar_context "
        f"{s['ar_context']}, K = {s['K']}, w = {s['w']}, P = {res['P']}; repeats {s['repeats']}.",
        "",
        head,
        sep,
        row(f"C_DLM (denoiser pass, {s['batch_size']} × {s['seq_len']})", lambda r: f"{r['C_DLM_s'] * 1e3:.1f} ms"),
        row("C_AR (proxy pass)", lambda r: f"{r['C_AR_s'] * 1e3:.1f} ms"),
        row("MDLM training (loss + backward + AdamW)", lambda r: f"{r['train_tokens_per_s'] / 1e3:.1f}k tok/s"),
        row(
            "MDLM, " + " / ".join(map(str, steps)) + " steps",
            lambda r: (
                " / ".join(
                    f"{run_of(r, S)['seconds_mdlm']:.2f}" if any(x["steps"] == S for x in r["runs"]) else "–"
                    for S in steps
                )
                + " s"
            ),
        ),
        row(
            f"Uni-E (K = {s['K']}, w = {s['w']}), " + " / ".join(map(str, steps)) + " steps",
            lambda r: (
                " / ".join(
                    f"{run_of(r, S)['seconds_uni']:.2f}" if any(x["steps"] == S for x in r["runs"]) else "–"
                    for S in steps
                )
                + " s"
            ),
        ),
        row(
            f"Algorithm 2 window step (w = 1, {res['window_steps']} steps) / its limit 1 + P·C_AR/C_DLM",
            lambda r: f"{r['window_step']['measured']:.2f} / {r['window_step']['limit']:.2f}",
        ),
        row(
            "same with the float64 Gumbel-max candidates (the old draw)",
            lambda r: f"{r['window_step']['measured_gumbel']:.2f} / {r['window_step']['limit']:.2f}",
        ),
        row(
            f"AR, KV cache, {s['seq_len']} tokens",
            lambda r: (
                f"{r['ar']['seconds']:.2f} s ({r['ar']['decode_path']}; capture {r['ar']['capture_seconds']:.2f} s)"
            ),
        ),
        row(
            f"AR, bf16 weights (no autocast), {s['seq_len']} tokens",
            lambda r: f"{r['ar_bf16_weights']['seconds']:.2f} s",
        ),
        row("peak GPU memory (this precision)", lambda r: f"{r['peak_gpu_gb']:.1f} GB"),
        "",
        "Ratios to their limits (AR per-token latency alongside):",
        "",
        head,
        sep,
        row(
            "window step / its limit",
            lambda r: f"{r['window_step']['measured_to_limit']:.3f} (AR {r['ar']['ms_per_token']:.2f} ms/token)",
        ),
        *[
            row(
                f"Uni-E / MDLM at {S} steps / its limit 1 + (window steps)·P·C_AR/C_DLM",
                lambda r, S=S: (
                    f"{run_of(r, S)['ratio']:.3f} / {run_of(r, S)['limit_window_fraction']:.3f} = "
                    f"{run_of(r, S)['ratio_to_limit']:.3f} (AR {r['ar']['ms_per_token']:.2f} ms/token)"
                ),
            )
            for S in steps
        ],
        "",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    """``python -m unie.pipeline.bench --paper-scale --device cuda --out DIR``: the paper-scale bench without
    snakemake (torch only); writes ``DIR/paper_scale.json`` and ``DIR/paper_scale.md``."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m unie.pipeline.bench", description=main.__doc__)
    ap.add_argument("--paper-scale", action="store_true", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    ap.add_argument("--steps", nargs="+", type=int, default=list(PaperScale.steps))
    ap.add_argument("--window-steps", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--skip", nargs="*", default=[], help="PRECISION:STEPS pairs not run, e.g. fp32:256")
    ap.add_argument("--tiny", action="store_true", help="d 32, 2 layers, L 64, V 100, batch 2 (a CPU check)")
    a = ap.parse_args(argv)
    tiny = dict(vocab_size=100, d_model=32, n_layers=2, n_heads=4, seq_len=64, batch_size=2, train_steps=2)
    skip = tuple((p, int(n)) for p, n in (x.split(":") for x in a.skip))
    size = PaperScale(
        **(tiny if a.tiny else {}), steps=tuple(a.steps), window_steps=a.window_steps, repeats=a.repeats, skip=skip
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(res):  # after each precision: the Markdown, then the JSON that vouches for it (its content hash)
        from ..core.integrity import atomic_write_text, write_json

        atomic_write_text(out / "paper_scale.md", paper_scale_markdown(res))
        write_json(res, out / "paper_scale.json", indent=1, records=[out / "paper_scale.md"])

    write(paper_scale_bench(a.device, size, a.precisions, on_precision=write, log=lambda m: print(m, flush=True)))
    print((out / "paper_scale.md").read_text())


if __name__ == "__main__":
    main()
