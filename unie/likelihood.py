"""Likelihood for Table 1.

* :func:`model_ppl`: a trained model's perplexity on each domain's evaluation split.  For diffusion
  models this is MDLM's validation bound ``exp(sum NELBO / sum tokens)`` averaged over ``n_mc``
  Monte-Carlo passes (one antithetic ``t`` per sequence per pass): an upper bound on the model's
  perplexity in expectation.  For AR models it is the exact teacher-forced NLL.
* :func:`exact_ppl`: the true distribution's perplexity ``exp(-sum log pi(x) / sum tokens)`` on the
  same sequences (toy world only): no trained model can beat it in expectation.
"""

from __future__ import annotations

import zlib

import torch

from .data import load_tokens
from .metrics import ppl_with_se
from .models.checkpoint import load_model
from .tokenizer import load_tokenizer


def model_ppl(model_dir, tokenizer_dir, data_paths: dict, n_mc: int = 1, batch_size: int = 256,
              max_sequences: int | None = None, seed: int = 0, device: str = "cpu", log=print) -> dict:
    from .jobs import build_method

    tok = load_tokenizer(tokenizer_dir)
    net, meta = load_model(model_dir, device=device, tokenizer_info=tok.info())
    method = build_method(meta["method"], tok.info(), meta.get("extra", {}).get("options", {}))
    passes = n_mc if getattr(method, "stochastic_nll", True) else 1
    out = {"model": str(model_dir), "method": meta["method"], "n_mc": passes, "domains": {}}
    for domain, path in data_paths.items():
        x = load_tokens(path, max_sequences)
        nll = torch.zeros(len(x), dtype=torch.float64)
        for mc in range(passes):
            g = torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}/{domain}/{mc}".encode()))
            for s in range(0, len(x), batch_size):
                nll[s:s + batch_size] += method.nll(net, x[s:s + batch_size].to(device), g).double().cpu()
        nll /= passes
        tokens = method.scored_tokens(x) if hasattr(method, "scored_tokens") else torch.full((len(x),), x.shape[1])
        out["domains"][domain] = ppl_with_se(nll, tokens)
        log(f"{domain}: ppl {out['domains'][domain]['ppl']:.3f} (nll/token {out['domains'][domain]['nll_per_token']:.4f} "
            f"± {out['domains'][domain]['nll_se']:.4f})")
    return out


def exact_ppl(data_paths: dict, tokenizer_dir, max_sequences: int | None = None, log=print) -> dict:
    from .toy_world import HMM

    tok = load_tokenizer(tokenizer_dir)
    out = {"model": "exact", "method": "exact", "domains": {}}
    for domain, path in data_paths.items():
        hmm = HMM(domain)
        if tok.vocab_size != hmm.V + 2:
            raise ValueError("exact perplexity needs the toy world's word tokenizer")
        x = load_tokens(path, max_sequences)
        nll = -hmm.log_marginal(x)
        out["domains"][domain] = ppl_with_se(nll, torch.full((len(x),), x.shape[1]))
        log(f"{domain}: exact ppl {out['domains'][domain]['ppl']:.3f}")
    return out
