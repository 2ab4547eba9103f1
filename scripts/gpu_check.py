"""Check the samplers on a GPU and measure them at paper scale (needs torch only: no snakemake, lm-eval, datasets).

(a) a correctness smoke on the device at tiny sizes: MDLM's sampler, Algorithm 2 (Uni-E, K = 2) with both candidate
    draws, the AR sampler (CUDA graph vs eager), and the exactness in distribution of the inverse-CDF draw (chi-square
    against the exact categorical, blocked tokens never drawn, the K draws independent); then a micro-bench of the two
    candidate draws at paper size;
(b) the paper-scale bench (:func:`unie.pipeline.bench.paper_scale_bench`, what rule ``bench_paper_scale`` runs) for
    bf16, TF32 and fp32 (most informative first; the JSON/Markdown are rewritten after each precision, so a time-out
    keeps what was measured).

    python scripts/gpu_check.py --out DIR                     # on a CUDA machine (~5 min on an H100)
    python scripts/gpu_check.py --out DIR --skip fp32:256     # leave out a (precision, steps) pair
    python scripts/gpu_check.py --out DIR --tiny --device cpu # a CPU check at tiny size

Writes DIR/smoke.json, DIR/paper_scale.json and DIR/paper_scale.md; what it showed on a GPU: docs/gpu-runs.md."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, without pip install

from unie.core.options import ModelConfig  # noqa: E402
from unie.core.gumbel import categorical_inverse_cdf  # noqa: E402
from unie.energy.sampler import propose, sample_energy  # noqa: E402
from unie.methods.ar import ARModel  # noqa: E402
from unie.methods.mdlm import MDLMDenoiser, sample_mdlm  # noqa: E402
from unie.models.transformer import Transformer  # noqa: E402
from unie.pipeline.bench import PaperScale, paper_scale_bench, paper_scale_markdown  # noqa: E402


def chi2_p_value(counts: torch.Tensor, p: torch.Tensor) -> float:
    n, keep = counts.sum(), p > 0
    chi2 = ((counts[keep] - n * p[keep]) ** 2 / (n * p[keep])).sum()
    return torch.special.gammaincc(torch.tensor((int(keep.sum()) - 1) / 2, dtype=torch.float64), chi2 / 2).item()


def smoke(dev: torch.device, paper: bool) -> dict:
    out, cuda = {}, dev.type == "cuda"
    g = lambda s: torch.Generator(device=dev).manual_seed(s)  # noqa: E731
    V, L, B = 40, 24, 6
    torch.manual_seed(0)
    dlm = MDLMDenoiser(
        Transformer(ModelConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, max_len=L)).to(dev).eval(),
        V - 1,
        (V - 2,),
    )
    arn = Transformer(ModelConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, max_len=L, causal=True))
    arn = arn.to(dev).eval()
    ar = ARModel(arn, V - 2, V - 1)
    x, _ = sample_mdlm(dlm, B, L, 8, g(1), batch_size=B, device=dev)
    out["mdlm_valid"] = bool(((x >= 0) & (x < V - 2)).all())
    for draw in ("auto", "gumbel", "inverse_cdf"):
        x, st = sample_energy(
            dlm, ar, B, L, 8, g(2), {"K": 2, "w": 0.5, "ar_context": "masked"}, batch_size=B, device=dev, draw=draw
        )
        out[f"uni_e_valid_{draw}"] = bool(((x >= 0) & (x < V - 2)).all()) and st["window_steps"] > 0
    # AR: the CUDA graph path against the eager loop (same seeds: the same tokens up to float near-ties)
    for prec in ("fp32", "bf16"):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=prec == "bf16"):
            a = ar.sample(B, L, g(3), batch_size=B)
            out[f"ar_decode_path_{prec}"] = ar.decode_path
            b = ar.sample(B, L, g(3), batch_size=B, graphs=False)
        out[f"ar_graph_vs_eager_token_agreement_{prec}"] = (a == b).double().mean().item()
        out[f"ar_valid_{prec}"] = bool(((a >= 0) & (a < V - 2)).all())
    # the released AR's convention (chunk_bos): BOS at position 0, L - 1 draws, on both decode paths
    bos_ar = ARModel(arn, V - 2, V - 1, blocked=(V - 1,), chunk_bos=True)
    a, b = bos_ar.sample(B, L, g(7), batch_size=B), bos_ar.sample(B, L, g(7), batch_size=B, graphs=False)
    out["ar_chunk_bos"] = {
        "decode_path": bos_ar.decode_path,
        "bos_first": bool((a[:, 0] == V - 2).all() and (b[:, 0] == V - 2).all()),
        "graph_vs_eager_token_agreement": (a == b).double().mean().item(),
    }
    # fixed-shape (graph) cache logits vs the eager slice
    xs = torch.randint(0, V - 2, (B, L), device=dev)
    with torch.no_grad():
        pos = torch.zeros(1, dtype=torch.long, device=dev)
        c1, c2, d = arn.static_cache(L), arn.static_cache(L, pos=pos), 0.0
        for i in range(L):
            pos.fill_(i)
            d = max(d, (arn(xs[:, i : i + 1], cache=c1) - arn(xs[:, i : i + 1], cache=c2)).abs().max().item())
    out["fixed_shape_cache_max_logit_diff_fp32"] = d
    # exactness in distribution of the inverse-CDF draw, on this device's generator
    p = torch.tensor([0.4, 0.0, 0.25, 0.2, 0.1, 1e-3, 0.049, 0.0], dtype=torch.float64)
    n = 1_000_000
    draws = categorical_inverse_cdf(p.log().float().to(dev).expand(n // 2, -1), 2, g(4)).cpu()
    counts = torch.bincount(draws.flatten(), minlength=8).double()
    pn = p / p.sum()
    pair = torch.bincount(draws[:, 0] * 8 + draws[:, 1], minlength=64).double()
    out["inverse_cdf"] = {
        "n": n,
        "blocked_drawn": int(counts[1] + counts[7]),
        "tv": 0.5 * (counts / n - pn).abs().sum().item(),
        "chi2_p": chi2_p_value(counts, pn),
        "pair_chi2_p": chi2_p_value(pair, (pn[:, None] * pn[None, :]).flatten()),
    }
    logits = torch.randn(1, 3, 6, generator=torch.Generator().manual_seed(0)) * 2
    logits[..., 5] = -math.inf
    logp = torch.log_softmax(logits, -1).to(dev)
    xt = torch.tensor([[5, 2, 5]], device=dev)
    m = 200_000
    x0 = propose(logp.expand(m, -1, -1), xt.expand(m, -1), 2, 5, g(5)).cpu()  # auto: inverse_cdf on CUDA
    pv = [
        chi2_p_value(torch.bincount(x0[:, j, i], minlength=6).double(), logp[0, i].double().exp().cpu())
        for i in (0, 2)
        for j in range(2)
    ]
    out["propose_auto"] = {
        "carry_over": bool((x0[:, :, 1] == 2).all()),
        "min_chi2_p": min(pv),
        "mask_drawn": int((x0 == 5).sum()),
    }
    ok = (
        out["mdlm_valid"]
        and all(out[f"uni_e_valid_{d}"] for d in ("auto", "gumbel", "inverse_cdf"))
        and out["inverse_cdf"]["blocked_drawn"] == 0
        and out["inverse_cdf"]["chi2_p"] > 1e-4
        and out["inverse_cdf"]["pair_chi2_p"] > 1e-4
        and out["propose_auto"]["carry_over"]
        and out["propose_auto"]["min_chi2_p"] > 1e-4
        and out["propose_auto"]["mask_drawn"] == 0
        and out["ar_valid_fp32"]
        and out["ar_valid_bf16"]
        and d < 1e-3
        and out["ar_chunk_bos"]["bos_first"]
        and (not cuda or out["ar_decode_path_fp32"] == out["ar_decode_path_bf16"] == "cuda_graph")
    )
    out["ok"] = bool(ok)
    # the two candidate draws at paper size: one window step's proposal, half the positions masked
    Bp, Lp, Vp = (8, 1024, 50258) if paper else (2, 64, 100)
    lp = torch.log_softmax(torch.randn(Bp, Lp, Vp, device=dev), -1)
    xt = torch.where(torch.rand(Bp, Lp, device=dev) < 0.5, Vp - 1, torch.randint(0, Vp - 2, (Bp, Lp), device=dev))
    lp = torch.where((xt == Vp - 1)[..., None], lp, torch.full_like(lp, -math.inf).scatter_(-1, xt[..., None], 0.0))
    bench = {}
    for draw in ("gumbel", "inverse_cdf"):
        propose(lp, xt, 2, Vp - 1, g(6), draw)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        t0 = time.perf_counter()
        for _ in range(3):
            propose(lp, xt, 2, Vp - 1, g(6), draw)
        if cuda:
            torch.cuda.synchronize()
        bench[draw] = {
            "ms": (time.perf_counter() - t0) / 3 * 1e3,
            "extra_peak_gb": (torch.cuda.max_memory_allocated() - base) / 1e9 if cuda else None,
        }
    out["propose_bench"] = {"B": Bp, "L": Lp, "V": Vp, "K": 2, "masked_fraction": 0.5, **bench}
    del lp, xt
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true", help="tiny sizes on whatever device (a CPU check)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--precisions", nargs="+", default=["bf16", "tf32", "fp32"])
    ap.add_argument("--steps", nargs="+", type=int, default=[128, 256])
    ap.add_argument("--skip", nargs="*", default=[], help="PRECISION:STEPS pairs not run, e.g. fp32:256")
    ap.add_argument("--no-smoke", action="store_true")
    a = ap.parse_args(argv)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}), torch {torch.__version__}",
        flush=True,
    )
    t0 = time.perf_counter()
    if not a.no_smoke:
        try:
            s = smoke(dev, paper=not a.tiny)
        except Exception:  # keep going to the bench: the smoke's failure is a result too
            s = {"ok": False, "error": traceback.format_exc()}
        s["seconds"] = time.perf_counter() - t0
        (out / "smoke.json").write_text(json.dumps(s, indent=1))
        print("smoke:", json.dumps(s, indent=1), flush=True)
    tiny = dict(vocab_size=100, d_model=32, n_layers=2, n_heads=4, seq_len=64, batch_size=2, train_steps=2)
    size = PaperScale(
        **(tiny if a.tiny else {}),
        steps=tuple(a.steps),
        skip=tuple((p, int(n)) for p, n in (x.split(":") for x in a.skip)),
    )

    def write(res):
        res["elapsed_s"] = time.perf_counter() - t0
        (out / "paper_scale.json").write_text(json.dumps(res, indent=1))
        (out / "paper_scale.md").write_text(paper_scale_markdown(res))

    res = paper_scale_bench(dev, size, a.precisions, on_precision=write, log=lambda m: print(m, flush=True))
    write(res)
    print((out / "paper_scale.md").read_text(), f"total {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
