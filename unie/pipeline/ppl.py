"""Rules ``ppl``, ``ppl_exact`` and ``ppl_energy``: Table 1's perplexities on every domain's evaluation split.

* :func:`model_ppl`: a trained model.  Diffusion models: MDLM's validation bound
  ``exp(sum NELBO / sum tokens)`` averaged over ``n_mc`` Monte-Carlo passes; AR models: the exact
  teacher-forced NLL.
* :func:`exact_ppl`: the true distribution's perplexity ``exp(-sum log pi(x) / sum tokens)`` on the same
  sequences (toy world only).
* :func:`energy_ppl`: an energy-corrected model (EDLM / Uni-EDLM rows) with the same sequences and
  Monte-Carlo seeds as :func:`model_ppl`.

Every result carries its identity (``source``: the Table 1 name it answers to) and, unless it is ``fp32``, the
``precision`` its network passes ran in (:mod:`unie.core.precision`).
"""

from __future__ import annotations

import torch

from ..core.precision import precision_record
from ..core.schedule import make_schedule
from ..data.tokens import load_expected_tokens
from ..data.tokenizer import load_tokenizer
from ..energy.corrected_nelbo import energy_corrected_nelbo
from ..eval.likelihood import mc_nll
from ..eval.metrics import ppl_with_se
from ..models.checkpoint import load_model
from .model_files import build_method, load_wrapped


def model_ppl(
    source: str,
    model_dir,
    tokenizer_dir,
    data_paths: dict,
    n_mc: int = 1,
    batch_size: int = 256,
    max_sequences: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    log=print,
    precision: str = "fp32",
) -> dict:
    tok = load_tokenizer(tokenizer_dir)
    net, meta = load_model(model_dir, device=device, tokenizer_info=tok.info())
    method = build_method(meta["method"], tok.info(), meta.get("extra", {}).get("options", {}))
    passes = n_mc if getattr(method, "stochastic_nll", True) else 1
    out = {
        "source": source,
        "model": str(model_dir),
        "method": meta["method"],
        "n_mc": passes,
        **precision_record(precision),
        "domains": {},
    }
    for domain, path in data_paths.items():
        x = load_expected_tokens(path, tok.info()["fingerprint"], domain, max_sequences).long()
        nll = mc_nll(x, lambda xb, g: method.nll(net, xb, g), passes, batch_size, seed, domain, device, precision)
        # the tokens the method scores per sequence: L, or L - 1 where position 0 is context (AR chunk_bos, BD3-LM
        # ignore_bos: as their authors count them)
        scored = method.scored_tokens(x.shape[1]) if hasattr(method, "scored_tokens") else x.shape[1]
        out["domains"][domain] = ppl_with_se(nll, torch.full((len(x),), scored))
        log(
            f"{domain}: ppl {out['domains'][domain]['ppl']:.3f} (nll/token {out['domains'][domain]['nll_per_token']:.4f} "
            f"± {out['domains'][domain]['nll_se']:.4f})"
        )
    return out


def exact_ppl(data_paths: dict, tokenizer_dir, max_sequences: int | None = None, log=print) -> dict:
    from ..data.toy_world import HMM

    tok = load_tokenizer(tokenizer_dir)
    out = {"source": "exact", "model": "exact", "method": "exact", "domains": {}}
    for domain, path in data_paths.items():
        hmm = HMM(domain)
        if tok.vocab_size != hmm.V + 2:
            raise ValueError("exact perplexity needs the toy world's word tokenizer")
        x = load_expected_tokens(path, tok.info()["fingerprint"], domain, max_sequences).long()
        nll = -hmm.log_marginal(x)
        out["domains"][domain] = ppl_with_se(nll, torch.full((len(x),), x.shape[1]))
        log(f"{domain}: exact ppl {out['domains'][domain]['ppl']:.3f}")
    return out


def energy_ppl(
    source: str,
    spec: dict,
    model_dirs: dict,
    tokenizer_dir,
    data_paths: dict,
    n_mc: int = 1,
    batch_size: int = 256,
    max_sequences: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    log=print,
    precision: str = "fp32",
) -> dict:
    """Table 1 perplexity of an energy-corrected model (``spec``: energy, dlm, and proxy + ar_context or ebm) on
    each domain."""
    tok = load_tokenizer(tokenizer_dir)
    dlm = load_wrapped(model_dirs["dlm"], tok, device)
    ar_context = spec.get("ar_context")
    if spec["energy"] == "ebm":
        ebm = load_wrapped(model_dirs["ebm"], tok, device)
        scorer_for = lambda domain: ebm
        estimator = "EDLM's plug-in (log F = -E_phi(x̂0, xt), x̂0 ~ p_theta)"
    elif ar_context == "exact":
        from ..data.toy_world import HMM, OracleAR

        scorer_for = lambda domain: OracleAR(HMM(domain), tok)
        estimator = "paper (energy-corrected conditional, closed-form log F)"
    else:
        proxy = load_wrapped(model_dirs["proxy"], tok, device)
        scorer_for = lambda domain: proxy
        estimator = "paper (energy-corrected conditional, closed-form log F)"
    schedule = make_schedule("loglinear")
    out = {
        "source": source,
        "spec": spec,
        "n_mc": n_mc,
        "estimator": estimator,
        **precision_record(precision),
        "domains": {},
    }
    with torch.no_grad():
        for domain, path in data_paths.items():
            x = load_expected_tokens(path, tok.info()["fingerprint"], domain, max_sequences).long()
            scorer = scorer_for(domain)
            nll = mc_nll(
                x,
                lambda xb, g: energy_corrected_nelbo(
                    dlm, scorer, spec["energy"], ar_context, xb, schedule, tok.mask_id, g
                ),
                n_mc,
                batch_size,
                seed,
                domain,
                device,
                precision,
            )
            out["domains"][domain] = ppl_with_se(nll, torch.full((len(x),), x.shape[1]))
            log(f"{domain}: ppl {out['domains'][domain]['ppl']:.3f}")
    return out
