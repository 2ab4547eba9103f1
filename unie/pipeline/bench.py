"""Rule ``bench``: the sampler benchmark of issue 10, every number measured side by side in one process.

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

Timing protocol (:mod:`unie.eval.timing`): models loaded first, warm-up untimed, one batch, median of repeats.
The window-step and whole-run ratios and their limits are measured in interleaved rounds (each round times
``C_DLM``, ``C_AR``, the plain, the ``w = 1`` and the ``w`` generation once, back to back) and reported as the
median over rounds of each round's ratio, so that a drift of the machine's speed during the bench (a shared
virtual CPU: ±30 % between minutes measured here) moves a ratio and its limit together.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..core.registry import SAMPLERS
from ..data.corpus import load_tokens
from ..data.tokenizer import load_tokenizer
from ..eval.timing import _sync, time_generation
from ..models.checkpoint import load_model
from .models import build_method, load_wrapped
from .timing import cpu_name


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
def pass_costs(dlm, proxy, x0: torch.Tensor, mask_id: int, repeats: int, device, warmup: int = 2
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


def run_bench(cfg: dict, inputs: dict, genppl: list[dict], *, seq_len: int, threads: int, evaluator: str,
              device: str = "cpu", log=print) -> dict:
    """The whole benchmark (module doc).  ``cfg``: config ``bench``; ``inputs``: ``tokenizer``, ``train`` (tokens)
    and ``dlm``/``proxy``/``ar`` checkpoint directories; ``genppl``: Figure 3's trade-off records (Uni-E and AR)."""
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
        t = {name: time_generation(energy, models, o, L, S, **{**kw, "warmup": 0, "repeats": 1, "seed": 1 + r})
             ["seconds"] for name, o in runs.items()}
        rounds.append({"C_DLM_s": c[0], "C_AR_s": c[1], **{f"seconds_{k}": v for k, v in t.items()}})
    med = statistics.median
    c_dlm, c_ar = med([x["C_DLM_s"] for x in rounds]), med([x["C_AR_s"] for x in rounds])
    log(f"C_DLM {c_dlm * 1e3:.2f} ms, C_AR {c_ar * 1e3:.2f} ms per {B} rows (medians of {len(rounds)} rounds); "
        f"P = {P}")
    _, stats = energy(models, B, L, S, torch.Generator(device=device).manual_seed(0), opts(K, 1.0), batch_size=B,
                      device=device)
    f = stats["energy_rows"] / max(1, B * stats["window_steps"])  # share of rows scored per window step
    _, stats_w = energy(models, B, L, S, torch.Generator(device=device).manual_seed(0), opts(K, w), batch_size=B,
                        device=device)
    frac = stats_w["window_steps"] / S  # the steps with t in (1 - w, 1]: w up to the grid's rounding
    ratios = [P * x["C_AR_s"] / x["C_DLM_s"] for x in rounds]  # P·C_AR/C_DLM of each round
    full = [x["seconds_full"] / x["seconds_plain"] for x in rounds]
    part = [x["seconds_part"] / x["seconds_plain"] for x in rounds]
    seconds = {name: med([x[f"seconds_{name}"] for x in rounds]) for name in runs}  # median seconds per batch
    out = {
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if str(device).startswith("cuda")
        else cpu_name(), "threads": threads, "torch": torch.__version__, "batch_size": B, "seq_len": L, "K": K,
        "w": w, "energy": cfg["energy"], "ar_context": cfg["ar_context"], "steps": S, "P": P,
        "C_DLM_s": c_dlm, "C_AR_s": c_ar, "rounds": rounds,
        "window_step": {"measured": med(full), "limit": med([1 + q for q in ratios]),
                        "rows_scored": f, "limit_rows_scored": med([1 + f * q for q in ratios]),
                        "measured_to_limit": med([m / (1 + q) for m, q in zip(full, ratios)]),
                        "seconds_plain": seconds["plain"], "seconds_energy": seconds["full"]},
        "whole_run": {"measured": med(part), "limit": med([1 + w * q for q in ratios]),
                      "window_fraction": frac, "limit_window_fraction": med([1 + frac * f * q for q in ratios]),
                      "seconds_plain": seconds["plain"], "seconds_energy": seconds["part"]},
    }
    ws = out["window_step"]
    ws["within_1.1"] = ws["measured_to_limit"] <= 1.1
    log(f"window step {ws['measured']:.3f} (limit {ws['limit']:.3f}; with {f:.2f} of rows scored "
        f"{ws['limit_rows_scored']:.3f}); whole run at w={w}: {out['whole_run']['measured']:.3f} "
        f"(limit {out['whole_run']['limit']:.3f})")
    # Uni-E vs the AR at equal Gen PPL (the paper's 10.5 s / 13.5 s = 0.78)
    ppl = {(r["sampling"]["run"], int(r["sampling"]["steps"])): r["genppl"][evaluator]["ppl"] for r in genppl}
    ar_ppl = ppl[(cfg["ar_run"], L)]
    ar_t = time_generation(SAMPLERS["ar"], {"ar": ar}, SAMPLERS["ar"].options({}), L, L, **kw)["seconds"]
    uni = []
    for s in sorted(s for (run, s) in ppl if run == cfg["uni_run"]):
        t = time_generation(energy, models, opts(K, w), L, s, **kw)["seconds"]
        uni.append({"steps": s, "seconds": t, "genppl": ppl[(cfg["uni_run"], s)]})
    hit = [u for u in uni if u["genppl"] <= ar_ppl]
    out["equal_quality"] = {"evaluator": evaluator, "ar_genppl": ar_ppl, "ar_seconds": ar_t, "uni": uni,
                            "steps": hit[0]["steps"] if hit else None,
                            "ratio_to_ar": hit[0]["seconds"] / ar_t if hit else None,
                            "paper_ratio": 10.5 / 13.5}
    log(f"AR {ar_t:.3f} s at Gen PPL {ar_ppl:.2f}; Uni-E " + ", ".join(
        f"{u['steps']} steps {u['seconds']:.3f} s Gen PPL {u['genppl']:.2f}" for u in uni))
    tps = train_throughput(inputs["dlm"], tok, load_tokens(inputs["train"], cfg["train_batch"]).long(),
                           cfg["train_steps"], device)
    out["train_tokens_per_s"] = tps
    log(f"training throughput of {inputs['dlm']}: {tps:.0f} tokens/s")
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
        (f"Uni-E first reaches the AR's Gen PPL at {eq['steps']} steps: wall-clock ratio "
         f"{eq['ratio_to_ar']:.2f} (the paper: {eq['paper_ratio']:.2f})." if eq["steps"] is not None else
         f"Uni-E never reaches the AR's Gen PPL at these step counts: no equal-quality ratio (the paper: "
         f"{eq['paper_ratio']:.2f})."),
    ]
    return "\n".join(lines) + "\n"
