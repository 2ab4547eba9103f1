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

from ..data.corpus import load_tokens
from ..data.tokenizer import load_tokenizer
from .metrics import ppl_with_se
from ..models.checkpoint import load_model


def mc_nll(x: torch.Tensor, nll_fn, n_mc: int, batch_size: int, seed: int, domain: str, device: str = "cpu"):
    """Per-sequence NLL ``(N,)`` averaged over ``n_mc`` Monte-Carlo passes of ``nll_fn(x_batch, generator) -> (b,)``;
    pass ``mc`` of ``domain`` draws from its own seeded generator, so every estimator sees the same seeds."""
    nll = torch.zeros(len(x), dtype=torch.float64)
    for mc in range(n_mc):
        g = torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}/{domain}/{mc}".encode()))
        for s in range(0, len(x), batch_size):
            nll[s:s + batch_size] += nll_fn(x[s:s + batch_size].to(device), g).double().cpu()
    return nll / n_mc


def model_ppl(model_dir, tokenizer_dir, data_paths: dict, n_mc: int = 1, batch_size: int = 256,
              max_sequences: int | None = None, seed: int = 0, device: str = "cpu", log=print) -> dict:
    from ..pipeline.jobs import build_method

    tok = load_tokenizer(tokenizer_dir)
    net, meta = load_model(model_dir, device=device, tokenizer_info=tok.info())
    method = build_method(meta["method"], tok.info(), meta.get("extra", {}).get("options", {}))
    passes = n_mc if getattr(method, "stochastic_nll", True) else 1
    out = {"model": str(model_dir), "method": meta["method"], "n_mc": passes, "domains": {}}
    for domain, path in data_paths.items():
        x = load_tokens(path, max_sequences)
        nll = mc_nll(x, lambda xb, g: method.nll(net, xb, g), passes, batch_size, seed, domain, device)
        tokens = method.scored_tokens(x) if hasattr(method, "scored_tokens") else torch.full((len(x),), x.shape[1])
        out["domains"][domain] = ppl_with_se(nll, tokens)
        log(f"{domain}: ppl {out['domains'][domain]['ppl']:.3f} (nll/token {out['domains'][domain]['nll_per_token']:.4f} "
            f"± {out['domains'][domain]['nll_se']:.4f})")
    return out


def exact_ppl(data_paths: dict, tokenizer_dir, max_sequences: int | None = None, log=print) -> dict:
    from ..data.toy_world import HMM

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


def energy_corrected_nelbo(dlm, proxy, energy_name: str, ar_context: str, x0: torch.Tensor, schedule, mask_id: int,
                           generator) -> torch.Tensor:
    """The paper's likelihood for EDLM / Uni-EDLM rows of Table 1, one Monte-Carlo sample per sequence ``(B,)``.

    The MDLM NELBO with the energy-corrected conditional in place of ``log p_theta(x0 | xt)``:
    ``w(t) * -[log p_theta(x0|xt) - E(x0, xs, xt) - log F]`` with ``xt ~ q(xt|x0)``, ``s = u t``,
    ``xs ~ q(xs | xt, x0)`` and the closed-form ``log F`` of :func:`unie.energy.log_partition`
    (Uni-E: ``log p_AR(xs|xt) - log p_theta(xs|xt)``, Eq. partition_calculation; Ind-E: 0, EDLM's
    self-normalised choice).  For Uni-E the corrected conditional equals ``log p_AR(x0 | xs)``: the tokens
    revealed in ``D`` are not scored at all, so this is *not* a bound (the brute-force check in the tests
    measures the missing normaliser).
    """
    from ..energy.energies import ARTerms, ENERGIES, log_partition, logp_dlm_x0
    from ..core.gumbel import uniform
    from ..methods.mdlm import q_xt
    from ..methods.mdlm import transition
    from ..core.schedule import antithetic_t

    B = x0.shape[0]
    t = antithetic_t(B, generator, 1e-3, x0.device)
    xt = q_xt(x0, schedule.mask_prob(t), mask_id, generator)
    logp = dlm.logp_x0(xt).to(x0.device)
    s = uniform((B,), generator, x0.device) * t.double()
    a_t, a_s = schedule.alpha(t.double()), schedule.alpha(s)
    xs = transition(xt, x0, a_t, a_s, mask_id, generator)
    x0k, xsk = x0[:, None], xs[:, None]
    ar = ARTerms(proxy, ar_context, xt, x0k, xsk, mask_id)
    E = ENERGIES[energy_name](xt, x0k, xsk, logp, ar, mask_id)
    logF = log_partition(energy_name, xt, x0k, xsk, logp, ar, mask_id)
    log_cond = logp_dlm_x0(logp, xt, x0k, mask_id) - E - logF
    return (schedule.weight(t.double()) * -log_cond[:, 0].double()).cpu()


def energy_ppl(spec: dict, model_dirs: dict, tokenizer_dir, data_paths: dict, n_mc: int = 1, batch_size: int = 256,
               max_sequences: int | None = None, seed: int = 0, device: str = "cpu", log=print) -> dict:
    """Table 1 perplexity of an energy-corrected model (``spec``: energy, dlm, proxy, ar_context) on each domain,
    with the same sequences and Monte-Carlo seeds as the plain bound of :func:`model_ppl`."""
    from ..pipeline.jobs import load_wrapped
    from ..core.schedule import make_schedule

    tok = load_tokenizer(tokenizer_dir)
    dlm = load_wrapped(model_dirs["dlm"], tok, device)
    if spec["ar_context"] == "exact":
        from ..data.toy_world import HMM, OracleAR

        proxy_for = lambda domain: OracleAR(HMM(domain), tok)
    else:
        proxy = load_wrapped(model_dirs["proxy"], tok, device)
        proxy_for = lambda domain: proxy
    schedule = make_schedule("loglinear")
    out = {"spec": spec, "n_mc": n_mc, "estimator": "paper (energy-corrected conditional, closed-form log F)",
           "domains": {}}
    with torch.no_grad():
        for domain, path in data_paths.items():
            x = load_tokens(path, max_sequences)
            proxy = proxy_for(domain)
            nll = mc_nll(x, lambda xb, g: energy_corrected_nelbo(dlm, proxy, spec["energy"], spec["ar_context"], xb,
                                                                 schedule, tok.mask_id, g),
                         n_mc, batch_size, seed, domain, device)
            out["domains"][domain] = ppl_with_se(nll, torch.full((len(x),), x.shape[1]))
            log(f"{domain}: ppl {out['domains'][domain]['ppl']:.3f}")
    return out
