"""Case studies picked by the toy world's exact π (the paper's four appendix figures, chosen by rule, not by hand).

For one sample ``x`` ``(L,)`` and the step that revealed each position ``step`` ``(L,)`` (``k`` = 0, 1, ...):

* **dependency gap** of step ``k`` (the tokens ``S`` it revealed together, ``|S| >= 2``; ``V`` the tokens visible
  before it): ``log π(x_S | x_V) − Σ_{i∈S} log π(x_i | x_V)``.  Zero when π makes them independent given ``V``;
  very negative when the jointly revealed tokens are much less likely together than one by one (the
  *non-independent* error of parallel decoding: each token fits the context, the combination does not).
* **invariance gap** of token ``i`` revealed at step ``k``: ``log π(x_i | x_V) − log π(x_i | x_{−i})``.  Large when
  the token was likely when it was revealed but π finds it unlikely given the finished sequence (the
  *non-invariant* error: a later token changed what ``x_i`` should have been).

``log π(x_A | x_B)`` is a ratio of the HMM's exact marginals of partially observed sequences
(``HMM.log_marginal``); ``π(x_i | x_{−i})`` and ``π(x_i | x_V)`` are its exact posteriors (``HMM.posterior``).
"""

from __future__ import annotations

import torch


def _gather(logp: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return logp.gather(-1, x.clamp(max=logp.shape[-1] - 1)[..., None]).squeeze(-1)


def case_gaps(hmm, x: torch.Tensor, step: torch.Tensor, steps: int) -> list[dict]:
    """For each sample ``x[n]`` ``(N, L)`` with reveal steps ``step[n]`` (``0 .. steps``): ``{"dep": {k: dependency
    gap of step k (>= 2 tokens revealed)}, "inv": (L,) invariance gaps}``, in nats.  All HMM calls batched over the
    samples and steps (rows ``(n, k)`` with the tokens visible before step ``k`` observed)."""
    x, step = x.cpu().long(), step.cpu().long()
    N, L = x.shape
    K = steps + 1
    xs = x[:, None, :].expand(N, K, L).reshape(N * K, L)
    ks = torch.arange(K)[None, :, None]
    before = (step[:, None, :] < ks).reshape(N * K, L)  # V_k
    at = (step[:, None, :] == ks).reshape(N * K, L)  # S_k
    cond = _gather(hmm.posterior(xs, before), xs).double().view(N, K, L)  # log pi(x_i | x_{V_k})
    joint = (hmm.log_marginal(xs, before | at) - hmm.log_marginal(xs, before)).view(N, K)  # log pi(x_{S_k} | x_{V_k})
    final = _gather(hmm.posterior(x, torch.ones_like(x, dtype=torch.bool)), x).double()  # log pi(x_i | x_{-i})
    at = at.view(N, K, L)
    out = []
    for n in range(N):
        dep = {k: float(joint[n, k] - cond[n, k][at[n, k]].sum()) for k in range(K) if int(at[n, k].sum()) >= 2}
        inv = cond[n].gather(0, step[n][None, :]).squeeze(0) - final[n]
        out.append({"dep": dep, "inv": inv})
    return out


def dependency_gaps(hmm, x: torch.Tensor, step: torch.Tensor) -> dict[int, float]:
    """Step ``k`` -> its dependency gap (nats) for one sample ``x`` ``(L,)``, every step with >= 2 tokens."""
    return case_gaps(hmm, x[None], step[None], int(step.max()))[0]["dep"]


def invariance_gaps(hmm, x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``(L,)`` invariance gap of every token of one sample (nats): at its reveal minus given the final sequence."""
    return case_gaps(hmm, x[None], step[None], int(step.max()))[0]["inv"]


def select_cases(mdlm: list[dict], uni: list[dict], dep_threshold: float, inv_threshold: float) -> dict:
    """Pick the two MDLM errors and the Uni-E samples of the same seeds.

    ``mdlm``/``uni``: per seed (same order) ``{"dep": {step: gap}, "inv": (L,) gaps}``.  An MDLM sample has a
    *non-independent* error when its worst dependency gap is below ``-dep_threshold`` and a *non-invariant* one
    when its largest invariance gap is above ``inv_threshold``; Uni-E *avoided* it when its sample of the same
    seed stays within the threshold.  Among the seeds where MDLM erred and Uni-E avoided the error, the worst
    MDLM error is shown; if Uni-E avoided none, the worst MDLM error overall (``avoided`` False says so)."""

    def worst_dep(r):
        return min(r["dep"].values()) if r["dep"] else 0.0

    def worst_inv(r):
        return float(r["inv"].max())

    out = {}
    for kind, score, bad in (
        ("dependency", worst_dep, lambda v: v < -dep_threshold),
        ("invariance", worst_inv, lambda v: v > inv_threshold),
    ):
        sign = 1 if kind == "dependency" else -1  # most negative dependency gap, largest invariance gap
        errors = [i for i, r in enumerate(mdlm) if bad(score(r))]
        avoided = [i for i in errors if not bad(score(uni[i]))]
        pool = avoided or errors or list(range(len(mdlm)))
        i = min(pool, key=lambda j: sign * score(mdlm[j]))
        out[kind] = {
            "index": i,
            "mdlm_gap": score(mdlm[i]),
            "uni_gap": score(uni[i]),
            "mdlm_error": bad(score(mdlm[i])),
            "avoided": bad(score(mdlm[i])) and not bad(score(uni[i])),
            "n_errors": len(errors),
            "n_avoided": len(avoided),
            "n_uni_errors": sum(bad(score(r)) for r in uni),
            "n": len(mdlm),
        }
    return out
